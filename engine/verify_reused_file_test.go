package engine

import (
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// reuseReadOnlyVictim drops the writer's segments below keep and appends until
// the .log file of victim (a segment of a read-only log on the same
// directory, mapped by it) is a segment of the writer again with records
// written at its start: the file a reader maps now holds another
// segment's records under the dropped segment's mapping.
func reuseReadOnlyVictim(t *testing.T, w *Log, victim *segment.Segment, keep uint64) {
	t.Helper()
	if _, err := w.DropBefore(keep); err != nil {
		t.Fatal(err)
	}
	id := victim.FileID()
	if id == ([2]uint64{}) {
		t.Fatal("the victim's file identity is unknown")
	}
	for deadline := time.Now().Add(time.Minute); ; {
		for _, s := range *w.segs.Load() {
			if s.FileID() == id && s.Next() > s.Base()+1 {
				awaitBackgroundSeal(w)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the victim's file was never reused: %+v", w.Stats())
		}
		if _, err := w.Append(generationBody(w.Next(), 1)); err != nil {
			t.Fatal(err)
		}
	}
}

// A read-only Verify run twice beside a writer that dropped a segment the
// read-only log maps and reused its file: the first Verify reads the
// reused file's new records at the dropped segment's start (a first
// record whose id is not the file name's) and leaves the segment out as
// dropped. The second must too: the log on disk is whole, and nothing
// about it changed between the two.
func TestVerifyTwiceBesideReusedFile(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	fillGenerationSegments(t, w, 6)
	r := mustOpenRO(t, dir, Options{})
	segs := *r.segs.Load()
	reuseReadOnlyVictim(t, w, segs[1], segs[2].Base())
	for i := range 2 {
		rep, err := r.Verify(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Healthy() {
			t.Fatalf("read-only Verify %d beside a writer that reused a dropped segment's file: not healthy: problems %q, missing %d, damaged %d, index %q",
				i+1, rep.Problems, rep.Missing, rep.Damaged, rep.IndexProblems)
		}
	}
	// The writer's own view, and a fresh read-only one, agree.
	checkGenerationRecordsFrom(t, w, w.First())
	if rep, err := mustOpenRO(t, dir, Options{}).Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("a new read-only Verify: %+v, %v", rep, err)
	}
}

// A read of the dropped and reused segment through the read-only log (a
// reader that had the offset from before the drop) comes before Verify:
// the read may fail, but Verify of the healthy log must not report the
// dropped segment.
func TestVerifyAfterReadOfReusedFile(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	fillGenerationSegments(t, w, 6)
	r := mustOpenRO(t, dir, Options{})
	segs := *r.segs.Load()
	victim := segs[1]
	reuseReadOnlyVictim(t, w, victim, segs[2].Base())
	rec, err := r.Read(victim.Base() + 1)
	t.Logf("Read(%d) of the dropped, reused segment: %v", victim.Base()+1, err)
	if err == nil {
		if verr := checkGenerationBody(rec, victim.Base()+1); verr != nil {
			t.Errorf("a read of a dropped segment returned another record's bytes: %v", verr)
		}
		rec.Release()
	}
	rep, err := r.Verify(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Healthy() {
		t.Fatalf("read-only Verify after a read of a dropped, reused segment: not healthy: problems %q, missing %d, damaged %d, index %q",
			rep.Problems, rep.Missing, rep.Damaged, rep.IndexProblems)
	}
}
