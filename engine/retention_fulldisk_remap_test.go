package engine

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// Retention by age keeps a young segment whose time index was rebuilt on
// a full disk, after an eviction and a mapping again. The rebuilt index
// is kept in memory only there; an eviction drops it, and a mapping that
// read the damaged file back with the rebuilt entry count once made
// NewestTime say the segment's newest record was from 1970, so retention
// by age dropped a segment of records appended a moment before.
func TestRetentionKeepsYoungSegmentAfterRemapOnFullDisk(t *testing.T) {
	fsdir := mountTmpfs(t, "2m")
	dir := filepath.Join(fsdir, "log")
	opts := Options{SegmentBytes: 4096, IndexIntervalBytes: 256}
	l := mustOpen(t, dir, opts)
	appendN(t, l, 200, func(uint64) int { return 100 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(segPath(dir, 0, segment.TimeIndexSuffix)); err != nil {
		t.Fatal(err)
	}
	opts.MaxMappedSegments = 1
	opts.RetentionAge = time.Hour // nothing here is that old
	l = mustOpen(t, dir, opts)
	segs := *l.segs.Load()
	fillDisk(t, fsdir)
	if ms, ok := segs[0].NewestTime(); ok { // the first lookup: rebuilt, not written
		t.Logf("segment 0's newest record: %v ago", time.Since(time.UnixMilli(ms)))
	}
	r, err := l.Read(segs[1].Base()) // maps segment 1: segment 0 is evicted
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	ms, ok := segs[0].NewestTime()
	t.Logf("after an eviction: segment 0's newest record: %v (%v)", time.UnixMilli(ms), ok)
	if n, err := l.retain(); err != nil || n > 0 {
		t.Fatalf("retention by age (an hour) dropped %d segments of records a moment old (%v); First is now %d", n, err, l.First())
	}
}
