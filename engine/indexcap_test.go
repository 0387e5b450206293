package engine

// An active segment written under a larger SegmentBytes holds records past
// the current one: when its index is rebuilt (new spacing at a reopen, a
// Truncate, lost index files) the index files must have room for all of
// them, or Verify reports a healthy log as damaged and Recover cannot
// repair it.

import (
	"os"
	"testing"
)

func mustBeHealthy(t *testing.T, l *Log, what string) {
	t.Helper()
	rep, err := l.Verify(nil)
	if err != nil {
		t.Fatalf("%s: Verify: %v", what, err)
	}
	if !rep.Healthy() {
		t.Errorf("%s: not healthy: %q %q", what, rep.Problems, rep.IndexProblems)
	}
}

// SegmentBytes and IndexIntervalBytes both lowered at a reopen: the
// active segment's index is rebuilt with the new spacing into files sized
// for the new SegmentBytes (257 entries of the 1999 the rule gives).
func TestIndexCapacityOldSegmentRebuild(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 64 << 10})
	sizes := appendN(t, l, 2000, func(uint64) int { return 16 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{SegmentBytes: 4096, IndexIntervalBytes: 1})
	checkAll(t, l, 0, sizes)
	mustBeHealthy(t, l, "reopened")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{})
	if !l.Recovery().Clean {
		t.Errorf("clean close not trusted: %q", l.Recovery().Active.CleanMismatch)
	}
	mustBeHealthy(t, l, "reopened twice")
}

// Truncate inside a segment written with larger segments: its index is
// rebuilt by the walk into files sized for the current SegmentBytes.
func TestIndexCapacityOldSegmentTruncate(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 64 << 10})
	sizes := appendN(t, l, 2000, func(uint64) int { return 16 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{SegmentBytes: 4096})
	if err := l.Truncate(1500); err != nil {
		t.Fatal(err)
	}
	checkAll(t, l, 0, sizes[:1500])
	mustBeHealthy(t, l, "truncated")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Recover(dir, Options{}, RecoverOptions{})
	if err != nil || !rep.After.Healthy() {
		t.Errorf("Recover: %v, after: %q", err, rep.After.IndexProblems)
	}
}

// The active segment's index files lost (a crash during Activate leaves a
// segment without them; or removed by hand), reopened with smaller
// segments: recovery says it repaired the index, Verify disagrees.
func TestIndexCapacityOldSegmentLostIndex(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 64 << 10})
	sizes := appendN(t, l, 2000, func(uint64) int { return 16 })
	crashClose(t, l)
	for _, suffix := range []string{".index", ".timeindex"} {
		if err := os.Remove(segPath(dir, 0, suffix)); err != nil {
			t.Fatal(err)
		}
	}
	l = mustOpen(t, dir, Options{SegmentBytes: 4096})
	checkAll(t, l, 0, sizes)
	mustBeHealthy(t, l, "reopened")
}
