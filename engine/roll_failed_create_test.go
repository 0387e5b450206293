package engine

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/mmapfile"
)

// A full disk that refuses the time index file of a new segment (the
// offset index file got its blocks just before): the roll, and the
// preparer, fail to make the segment, and each failure must give back
// what it took. The offset index file was mapped already; its mapping
// (of a file the failure removes) must go too, or each failed roll keeps
// a mapping and the disk blocks of a removed file until the process
// ends, on the very disk that is full.
func TestRollFailedCreateUnmapsOffsetIndex(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	var refused atomic.Int64
	opts := Options{SegmentBytes: 4 << 10}
	opts.allocate = func(f *os.File, off, n int64) error {
		if full.Load() && strings.HasSuffix(f.Name(), segment.TimeIndexSuffix) {
			refused.Add(1)
			return syscall.ENOSPC
		}
		return mmapfile.Allocate(f, off, n)
	}
	l := mustOpen(t, dir, opts)
	fillGenerationSegments(t, l, 3)
	base := len(testkit.MapsUnder(t, dir))
	full.Store(true)
	failed := 0
	for i := 0; failed < 20 && i < 100000; i++ {
		_, err := l.Append(generationBody(l.Next(), 0))
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatal(err)
		}
		failed++
	}
	if failed == 0 {
		t.Fatal("no append failed")
	}
	time.Sleep(20 * time.Millisecond) // the preparer's attempts end
	t.Logf("%d appends failed, %d time index allocations refused; mappings of the log's files: %d before, %d now",
		failed, refused.Load(), base, len(testkit.MapsUnder(t, dir)))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(testkit.MapsUnder(t, dir)); n != 0 {
		t.Fatalf("after %d failed segment creations and Close: %d mappings of the log's files left:\n%s", refused.Load(), n, testkit.MapsUnder(t, dir))
	}
}
