package engine

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/mmapfile"
)

// A batch that the disk fills partway through reports the records it did
// write: n and first match the log, and the error says why it stopped.
// (Records are appended one by one through the mapping; the second one
// here needs the .log's next allocation step, which is refused.)
func TestAppendBatchCountsRecordsBeforeFullDisk(t *testing.T) {
	opts := Options{SegmentBytes: 64 << 20, MaxRecordBytes: 4 << 20}
	opts.allocate = func(f *os.File, off, n int64) error {
		if off > 0 && strings.HasSuffix(f.Name(), segment.LogSuffix) {
			return syscall.ENOSPC // only a .log's first step
		}
		return mmapfile.Allocate(f, off, n)
	}
	l := mustOpen(t, t.TempDir(), opts)
	defer l.Close()
	bodies := [][]byte{make([]byte, 64<<10), make([]byte, 1<<20+512<<10)} // the first within the first step
	first, n, err := l.AppendBatch(bodies, nil)
	if err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("AppendBatch past the allocated file: %v, want a full-disk error", err)
	}
	if first != 0 || n != 1 || l.Next() != 1 {
		t.Fatalf("AppendBatch reported first %d, n %d (%v); the log holds [0, %d)", first, n, err, l.Next())
	}
	r, err := l.Read(0)
	if err != nil || len(r.Body) != len(bodies[0]) {
		t.Fatalf("Read(0): %v", err)
	}
	r.Release()
}
