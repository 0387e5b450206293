package engine

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestAppendOnFullDiskUsesSpareFiles: a log that keeps dropped segments'
// files for reuse does not fail an append for want of space while it
// holds them: on a disk full to the last block, the append that needs
// space removes them (ReleaseSpares) and goes on in their space. Appends
// fail with ENOSPC only once none is left, and everything appended reads.
func TestAppendOnFullDiskUsesSpareFiles(t *testing.T) {
	fsdir := mountTmpfs(t, "8m")
	dir := filepath.Join(fsdir, "log")
	const segBytes = 256 << 10
	l := mustOpen(t, dir, Options{SegmentBytes: segBytes, RecycleSegments: 3})
	fillGenerationSegments(t, l, 6)
	segs := *l.segs.Load()
	if _, err := l.DropBefore(segs[3].Base()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !hasRecycled(t, dir); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no dropped file was kept for reuse")
		}
	}
	spares := sparesIn(t, dir)
	fillDisk(t, fsdir)
	from := l.Next()
	var full error
	for full == nil {
		_, full = l.Append(generationBody(l.Next(), 0))
	}
	if !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("appends on a full disk ended with %v, want ENOSPC", full)
	}
	n := l.Next() - from
	bytes := n * uint64(len(generationBody(from, 0)))
	t.Logf("spare files before the disk filled: %v; %d appends, %d bytes, after", spares, n, bytes)
	if hasRecycled(t, dir) {
		t.Fatalf("an append failed with ENOSPC while the log kept a dropped file for reuse: %v", sparesIn(t, dir))
	}
	if bytes < segBytes {
		t.Fatalf("%d appends after the disk filled: the space of the kept files (%d bytes each) was not used", n, segBytes)
	}
	checkGenerationRecordsFrom(t, l, l.First())
}
