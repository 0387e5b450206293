package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// offsetForTimeFullWalk is OffsetForTime as it was before sealed segments
// were passed over on their known time-index end: every segment acquired,
// its time index searched, from the oldest on.
func offsetForTimeFullWalk(l *Log, t time.Time) uint64 {
	ms := t.UnixMilli()
	segs := *l.segs.Load()
	answer := l.First()
	for _, s := range segs {
		if !s.Acquire() {
			continue
		}
		x := s.TimeIndex()
		i := x.Times.FirstAtOrAfter(x.N, ms)
		if i > 0 {
			_, rel := x.Times.Entry(i - 1)
			answer = s.Base() + uint64(rel) + 1
		}
		s.Release()
		if x.N > 0 && i < x.N {
			break
		}
	}
	return max(answer, l.First())
}

// offsetTimeClock is an injected clock for Options.now.
type offsetTimeClock struct{ ms int64 }

func (c *offsetTimeClock) now() time.Time { return time.UnixMilli(c.ms) }

// fillClockBack appends n records to l, moving its clock on by a few
// milliseconds now and then, and back by up to back ms at each roll (a
// clock that goes back between segments). It returns the lowest and the
// highest time used.
func fillClockBack(t *testing.T, l *Log, c *offsetTimeClock, n int, back int64, rng *rand.Rand) (lo, hi int64) {
	t.Helper()
	lo, hi = c.ms, c.ms
	segs := len(*l.segs.Load())
	for i := range n {
		if rng.IntN(4) == 0 {
			c.ms += int64(rng.IntN(6))
		}
		off := l.Next()
		if _, err := l.Append(testBody(off, 20+rng.IntN(300))); err != nil {
			t.Fatal(err)
		}
		if k := len(*l.segs.Load()); k != segs {
			segs = k
			if back > 0 && i%3 != 0 {
				c.ms -= 1 + rng.Int64N(back)
			}
		}
		lo, hi = min(lo, c.ms), max(hi, c.ms)
	}
	return lo, hi
}

// compareWithFullWalk asks OffsetForTime for up to 150 milliseconds of [lo-3, hi+3]
// (every one when there are fewer), in a random order, twice, and each
// answer must be the old algorithm's,
// asked right after it (which reads every segment's time index, and so
// refreshes what the new one may pass over on).
func compareWithFullWalk(t *testing.T, what string, l *Log, lo, hi int64, rng *rand.Rand) {
	t.Helper()
	var qs []int64
	for q := lo - 3; q <= hi+3; q++ {
		qs = append(qs, q)
	}
	for round := range 2 {
		rng.Shuffle(len(qs), func(i, j int) { qs[i], qs[j] = qs[j], qs[i] })
		for _, q := range qs[:min(len(qs), 150)] {
			got, err := l.OffsetForTime(time.UnixMilli(q))
			if err != nil {
				t.Fatalf("%s: OffsetForTime(%d): %v", what, q, err)
			}
			want := offsetForTimeFullWalk(l, time.UnixMilli(q))
			if got != want {
				t.Fatalf("%s, round %d: OffsetForTime(%d) = %d, the walk over every segment says %d (segments %d, mapped %d)",
					what, round, q, got, want, len(*l.segs.Load()), l.cfg.Maps.Mapped())
			}
			again, _ := l.OffsetForTime(time.UnixMilli(q))
			if again != want {
				t.Fatalf("%s, round %d: OffsetForTime(%d) = %d after the walk over every segment, which says %d",
					what, round, q, again, want)
			}
		}
	}
}

// TestOffsetForTimeClockBackMatchesFullWalk: a clock that goes back between
// segments, asked on the live log, after a reopen with one or two
// segments mapped, and after a reopen with another index spacing (every
// sealed segment's index rebuilt at its first lookup).
func TestOffsetForTimeClockBackMatchesFullWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := &offsetTimeClock{ms: 1_700_000_000_000}
	opts := Options{SegmentBytes: 6 << 10, IndexIntervalBytes: 512}
	opts.now = c.now
	dir := t.TempDir()
	l := mustOpen(t, dir, opts)
	lo, hi := fillClockBack(t, l, c, 1500, 40, rng)
	if n := len(*l.segs.Load()); n < 20 {
		t.Fatalf("only %d segments", n)
	}
	compareWithFullWalk(t, "live", l, lo, hi, rng)
	for _, o := range []struct {
		maps, interval int
	}{{1, 512}, {2, 200}, {1, 2048}} {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		opts.MaxMappedSegments, opts.IndexIntervalBytes = o.maps, o.interval
		l = mustOpen(t, dir, opts)
		compareWithFullWalk(t, "reopened", l, lo, hi, rng)
		// Appends after the reopen, the clock back again.
		c.ms -= 30
		l2, h2 := fillClockBack(t, l, c, 100, 40, rng)
		lo, hi = min(lo, l2), max(hi, h2)
		compareWithFullWalk(t, "reopened and appended", l, lo, hi, rng)
	}
}

// damageTimeIndexFiles damages the .timeindex files of the sealed segments
// of the log in dir in turn: removed, cut short by one entry and a half,
// emptied, garbage appended, and every fifth one left. A rebuild takes
// the .log file's modification time for the entries it cannot keep: each
// damaged segment's is set to a time in [lo, hi], so that rebuilt entries
// fall among the others.
func damageTimeIndexFiles(t *testing.T, dir string, lo, hi int64, rng *rand.Rand) {
	t.Helper()
	bases, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, base := range bases[:len(bases)-1] {
		path := segPath(dir, base, segment.TimeIndexSuffix)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 5 {
		case 0:
			err = os.Remove(path)
		case 1:
			err = os.WriteFile(path, b[:max(0, len(b)-18)], 0o600)
		case 2:
			err = os.WriteFile(path, nil, 0o600)
		case 3:
			err = os.WriteFile(path, append(b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%5 != 4 {
			mt := time.UnixMilli(lo + rng.Int64N(hi-lo+1))
			if err := os.Chtimes(segPath(dir, base, segment.LogSuffix), mt, mt); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestOffsetForTimeDamagedTimeIndexMatchesFullWalk: time indexes damaged on disk
// are rebuilt at their first lookup and written back. With one or two
// segments mapped, segments are evicted and mapped again between
// questions: the answers must stay the walk's. A read-only log of the
// same segments, undamaged, with one segment mapped, answers alike.
func TestOffsetForTimeDamagedTimeIndexMatchesFullWalk(t *testing.T) {
	for _, maps := range []int{1, 2} {
		t.Run(fmt.Sprint(maps), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(maps), 7))
			c := &offsetTimeClock{ms: time.Now().Add(-time.Hour).UnixMilli()}
			opts := Options{SegmentBytes: 6 << 10, IndexIntervalBytes: 512}
			opts.now = c.now
			dir := t.TempDir()
			w := mustOpen(t, dir, opts)
			lo, hi := fillClockBack(t, w, c, 1000, 25, rng)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			opts.MaxMappedSegments = maps
			ro := mustOpenRO(t, dir, opts)
			compareWithFullWalk(t, "read-only", ro, lo, hi, rng)
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
			damageTimeIndexFiles(t, dir, lo, hi, rng)
			l := mustOpen(t, dir, opts)
			compareWithFullWalk(t, "damaged", l, lo, hi, rng)
		})
	}
}
