package engine

import (
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// removeSealedIndexFiles removes the index files of every sealed segment of the
// log in dir: a reader's first lookup of each one rebuilds its index.
func removeSealedIndexFiles(t *testing.T, dir string) {
	t.Helper()
	bases, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range bases[:len(bases)-1] {
		for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
			if err := os.Remove(segPath(dir, base, suffix)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// orphanIndexFiles returns the index files in dir whose segment's .log is
// not there, and the recycled-* and prepared.* files.
func orphanIndexFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		if isRecycledName(name) || strings.HasPrefix(name, segment.PreparedPrefix) {
			out = append(out, name)
			continue
		}
		base, suffix, ok := segment.ParseName(name)
		if !ok || suffix == segment.LogSuffix {
			continue
		}
		if _, err := os.Stat(segPath(dir, base, segment.LogSuffix)); err != nil {
			out = append(out, name)
		}
	}
	return out
}

// TestDropRacingFirstIndexLookupLeavesNoFiles: a log reopened with many sealed
// segments mapped lazily (at their first use), none of them with its
// index files: readers' first lookups rebuild the indexes (Read,
// OffsetForTime, Records) while DropBefore, retention, Truncate and
// appends run, and Close at the end. No index file of a dropped or cut
// segment may be left, nor a recycled or prepared file; the reopen is
// clean with no note, and every record reads back.
func TestDropRacingFirstIndexLookupLeavesNoFiles(t *testing.T) {
	deadline := time.Now().Add(4 * time.Second)
	round := 0
	defer func() { t.Logf("%d rounds", round) }()
	for ; round < 40 && time.Now().Before(deadline); round++ {
		rng := rand.New(rand.NewPCG(uint64(round), 3))
		dir := t.TempDir()
		opts := Options{SegmentBytes: 2048, IndexIntervalBytes: 128}
		l := mustOpen(t, dir, opts)
		appendN(t, l, 600, func(uint64) int { return 40 + rng.IntN(100) })
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		removeSealedIndexFiles(t, dir)
		// Segments are mapped on first use and evicted (a dropped
		// segment a reader still holds is not: its mapping is the
		// reader's; TestEvictKeepsHeldRecordOfDroppedSegment).
		opts.MaxMappedSegments = 1 + round%3
		opts.RecycleSegments = round % 3
		if round%4 == 3 {
			opts.RetentionBytes = 40 << 10
		}
		l = mustOpen(t, dir, opts)
		var stop atomic.Bool
		var wg sync.WaitGroup
		fail := make(chan error, 8)
		report := func(err error) {
			select {
			case fail <- err:
			default:
			}
		}
		for r := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rr := rand.New(rand.NewPCG(uint64(round), uint64(r)))
				for !stop.Load() {
					first, next := l.First(), l.Next()
					if next <= first {
						continue
					}
					off := first + rr.Uint64N(next-first)
					switch rr.IntN(3) {
					case 0:
						rec, err := l.Read(off)
						if err == nil {
							rec.Release()
						} else if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrTrimmed) && !errors.Is(err, ErrClosed) &&
							off >= l.First() && l.Next() > off {
							// (An offset dropped or cut meanwhile may
							// read as a segment that cannot be mapped.)
							report(err)
						}
					case 1:
						o, err := l.OffsetForTime(time.Now().Add(-time.Duration(rr.IntN(5000)) * time.Millisecond))
						if err != nil && !errors.Is(err, ErrClosed) {
							report(err)
						}
						if err == nil && o > l.Next() {
							report(errors.New("OffsetForTime past Next"))
						}
					case 2:
						n := 0
						for _, err := range l.Records(off) {
							if err != nil || n > 20 {
								break
							}
							n++
						}
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // the writer: appends, drops, cuts
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(round), 99))
			for i := 0; !stop.Load(); i++ {
				switch {
				case i%7 == 6:
					// A cut within the active segment, or at or inside one
					// of the newest sealed ones: that one becomes the
					// active segment again, its file copied (the record
					// before a cut inside a sealed segment is read with a
					// reference: TestTruncateCutPositionHoldsSegment).
					segs := *l.segs.Load()
					at := l.active.Base() + uint64(rng.IntN(int(l.Next()-l.active.Base())+1))
					if k := len(segs) - 1 - rng.IntN(4); rng.IntN(2) == 0 && k > 0 {
						at = segs[k].Base() + uint64(rng.IntN(int(segs[k].Next()-segs[k].Base())))
					}
					if at > l.First() {
						if err := l.Truncate(at); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotFound) {
							report(err)
							return
						}
					}
				case i%3 == 0:
					if _, err := l.DropBefore(l.First() + 20); err != nil && !errors.Is(err, ErrClosed) {
						report(err)
						return
					}
				default:
					if _, err := l.Append(testBody(l.Next(), 60)); err != nil && !errors.Is(err, ErrClosed) {
						report(err)
						return
					}
				}
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
			}
		}()
		time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
		if round%2 == 1 {
			// Close racing the readers and the writer.
			if err := l.Close(); err != nil {
				t.Fatalf("round %d: Close: %v", round, err)
			}
		}
		stop.Store(true)
		wg.Wait()
		if round%2 == 0 {
			if err := l.Close(); err != nil {
				t.Fatalf("round %d: Close: %v", round, err)
			}
		}
		select {
		case err := <-fail:
			t.Fatalf("round %d: %v", round, err)
		default:
		}
		if left := orphanIndexFiles(t, dir); len(left) > 0 {
			t.Fatalf("round %d: left after Close: %q", round, left)
		}
		l = mustOpen(t, dir, Options{SegmentBytes: 2048, IndexIntervalBytes: 128})
		if rec := l.Recovery(); !rec.Clean || len(rec.Notes) > 0 || rec.IndexesRebuilt > 0 {
			t.Fatalf("round %d: the reopen found %+v", round, rec)
		}
		for off := l.First(); off < l.Next(); off++ {
			rec, err := l.Read(off)
			if err != nil {
				t.Fatalf("round %d: Read(%d) after the reopen: %v", round, off, err)
			}
			rec.Release()
		}
		if v, err := l.Verify(nil); err != nil || !v.Healthy() {
			t.Fatalf("round %d: Verify: %+v, %v", round, v, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
