package engine

import (
	"testing"
	"time"
)

// A read-only Verify beside a writer that drops a segment the verifier
// maps and reuses its file at once (RecycleSegments): the reused file's
// bytes are made zero under the verifier's mapping, and its records read
// as ending at its base, before the next segment's. That is the drop's
// doing, not missing records: the report stays healthy and leaves the
// segment out, as one dropped before Verify took it.
func TestVerifyReadOnlyBesideRecycledDrop(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	a6Fill(t, w, 6)
	r := mustOpenRO(t, dir, Options{})
	segs := *r.segs.Load()
	victim := segs[1]
	// The verifier maps the victim before the drop, and reads nothing of
	// it before the file is reused.
	if !victim.Acquire() {
		t.Fatal("Acquire")
	}
	defer victim.Release()
	dropped := false
	rep, err := r.Verify(func(done, total int64) {
		if dropped {
			return
		}
		dropped = true
		before := w.Stats().Recycled
		if _, err := w.DropBefore(segs[2].Base()); err != nil {
			t.Fatal(err)
		}
		// Rolls until the victim's file was reused (made zero).
		for deadline := time.Now().Add(10 * time.Second); w.Stats().Recycled < before+2; {
			if time.Now().After(deadline) {
				t.Fatalf("no dropped file reused: %+v", w.Stats())
			}
			if _, err := w.Append(a6Body(w.Next(), 1)); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !dropped {
		t.Fatal("Verify never called progress")
	}
	if !rep.Healthy() {
		t.Fatalf("Verify beside the drop: not healthy: %+v", rep)
	}
}
