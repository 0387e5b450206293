package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// A read-only Verify beside a writer that drops and reuses segments
// (RecycleSegments) still reports damage in a segment that stays: a
// flipped byte in the body of a record of a sealed segment the writer
// never drops is found, whatever the drops and reuses of the segments
// before it while Verify runs, and on every run.
func TestVerifyReportsDamageBesideReuse(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	fillGenerationSegments(t, w, 30)
	segs := *w.segs.Load()
	victim := segs[len(segs)-3] // sealed, and never dropped below
	bad := victim.Base() + 2
	r, err := w.Read(bad)
	if err != nil {
		t.Fatal(err)
	}
	pos := recordPosInSegment(t, w, bad)
	r.Release()
	f, err := os.OpenFile(victim.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	at := pos + 30 // inside the body (header and attributes are shorter)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	keep := victim.Base()
	for run := range 6 {
		ro := mustOpenRO(t, dir, Options{MaxMappedSegments: 1 + run%3})
		dropped := false
		rep, err := ro.Verify(func(done, total int64) {
			if dropped {
				return
			}
			dropped = true
			// Drop the oldest segments (never the damaged one) and
			// roll until their files are reused.
			segs := *w.segs.Load()
			if len(segs) > 3 && segs[2].Base() < keep {
				before := w.Stats().Recycled
				if _, err := w.DropBefore(segs[2].Base()); err != nil {
					t.Error(err)
					return
				}
				for deadline := time.Now().Add(time.Minute); w.Stats().Recycled < before+1 && time.Now().Before(deadline); {
					if _, err := w.Append(generationBody(w.Next(), 1)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Damaged != 1 || rep.FirstDamage == nil || rep.FirstDamage.Offset != bad {
			t.Fatalf("run %d: read-only Verify beside drops and reuses: damaged %d, first %+v; want the record at %d (problems %q, missing %d)",
				run, rep.Damaged, rep.FirstDamage, bad, rep.Problems, rep.Missing)
		}
		if rep.Missing != 0 || len(rep.Problems) != 0 {
			t.Fatalf("run %d: problems %q, missing %d beside drops and reuses", run, rep.Problems, rep.Missing)
		}
		if err := ro.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// recordPosInSegment returns the position of the record at off in its segment.
func recordPosInSegment(t *testing.T, l *Log, off uint64) int64 {
	t.Helper()
	for ri := range l.Inspect(off) {
		if ri.Offset == off {
			return ri.Position
		}
		break
	}
	t.Fatalf("record %d not found", off)
	return 0
}

// Read-only Verify runs, each on a log opened for it, beside a writer
// that appends, drops and reuses segment files all along: every report
// is healthy (the log is), whatever segments the writer drops and reuses
// under the verifier's mappings.
func TestVerifyFreshReadOnlyBesideChurn(t *testing.T) {
	for _, maxMapped := range []int{1, 3, 128} {
		t.Run(fmt.Sprint(maxMapped), func(t *testing.T) {
			dir := t.TempDir()
			w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
			fillGenerationSegments(t, w, 8)
			h := startChurn(w, verifyChurnConfig)
			runs := 0
			for deadline := time.Now().Add(time.Second); (time.Now().Before(deadline) || runs < 50) && h.err() == nil; runs++ {
				ro, err := OpenReadOnly(dir, Options{MaxMappedSegments: maxMapped})
				if err != nil {
					h.fail(fmt.Errorf("OpenReadOnly: %w", err))
					break
				}
				rep, err := ro.Verify(nil)
				_ = ro.Close()
				if err != nil {
					h.fail(fmt.Errorf("Verify: %w", err))
					break
				}
				if !rep.Healthy() {
					h.fail(fmt.Errorf("run %d: read-only Verify beside drops and reuses: not healthy: problems %q, missing %d, damaged %d (first %+v), index %q",
						runs, rep.Problems, rep.Missing, rep.Damaged, rep.FirstDamage, rep.IndexProblems))
					break
				}
			}
			if err := h.end(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d verifications, %d segments made from kept files", runs, w.Stats().Recycled)
			if w.Stats().Recycled == 0 {
				t.Fatal("no segment file reused")
			}
		})
	}
}

// verifyChurnConfig is the churn beside the read-only Verify runs: a
// writer that appends records one at a time and, every 20, drops all
// but the last five segments (their files reused).
var verifyChurnConfig = churnConfig{
	afterAppend: func(h *churn, _ *rand.Rand, i int) error {
		if i%20 != 0 {
			return nil
		}
		if segs := *h.l.segs.Load(); len(segs) > 6 {
			if _, err := h.l.DropBefore(segs[len(segs)-5].Base()); err != nil {
				return fmt.Errorf("DropBefore: %w", err)
			}
		}
		return nil
	},
}

// One read-only log verified again and again beside a writer that
// appends, drops and reuses segment files, with a reader of the
// read-only log beside it: every report is healthy, as the log is.
func TestVerifySameReadOnlyBesideChurn(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	fillGenerationSegments(t, w, 8)
	ro := mustOpenRO(t, dir, Options{})
	// A reader of the read-only log beside the churn.
	cfg := verifyChurnConfig
	cfg.extra = []func(h *churn, rng *rand.Rand){func(h *churn, _ *rand.Rand) {
		for off := uint64(0); !h.stopped(); off = (off + 7) % max(ro.Next(), 1) {
			if r, err := ro.Read(off); err == nil {
				r.Release()
			}
		}
	}}
	h := startChurn(w, cfg)
	kinds := map[string]int{}
	runs := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && h.err() == nil; runs++ {
		rep, err := ro.Verify(nil)
		if err != nil {
			h.fail(err)
			break
		}
		if !rep.Healthy() {
			for _, p := range rep.Problems {
				kinds["problem: "+p[min(len(p), 40):]]++
			}
			for _, p := range rep.IndexProblems {
				kinds["index: "+p[min(len(p), 40):]]++
			}
			if rep.Missing > 0 {
				kinds["missing"]++
			}
			if rep.Damaged > 0 {
				kinds["damaged"]++
			}
		}
	}
	if err := h.end(); err != nil {
		t.Fatal(err)
	}
	if len(kinds) > 0 {
		t.Fatalf("%d read-only Verify runs of one log beside drops and reuses; unhealthy reports: %v", runs, kinds)
	}
}
