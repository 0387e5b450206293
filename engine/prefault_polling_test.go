package engine

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// The polling prefaulter looks on its own while the writer moves, parks
// once it stops, and is kicked only when parked; it also faults in the
// index files' pages. These tests drive it through bursts and pauses
// around its poll interval, rolls, cuts, drops, Close and reuse of dropped
// files: it must catch up and park, never leave a goroutine behind, and
// never change an index entry it touches.

// prefaultCaughtUp reports whether the prefaulter has filled the active
// segment to within a step of its reach, as TestPrefaulterParksAndWakes
// asks, and where the two stand.
func prefaultCaughtUp(l *Log) (ok bool, pop, end int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	end, pop = l.active.End(), l.active.Populated()
	return pop >= min(end+l.pre.ahead.Load()-l.pre.step.Load(), l.cfg.SegmentBytes), pop, end
}

// waitCaughtUp waits for the prefaulter to catch up with the writer and
// returns how long it took (a minute is taken for a hang).
func waitCaughtUp(t *testing.T, l *Log, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, pop, end := prefaultCaughtUp(l)
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("%s: the prefaulter stopped at %d with the writer at %d (polling %v)", what, pop, end, l.pre.polling.Load())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// Bursts of appends with pauses of 0 to 1 ms between them (around the poll
// interval, so that some end in the window between the prefaulter's last
// look and its parking), segments that roll every few bursts, Truncate and
// DropBefore while it polls, under each sync policy and with reuse of
// dropped files: after every burst the prefaulter catches up with the new
// active segment, and once the writer stops it parks (never polls at all
// under SyncAlways, whose appends go in with pwrite and have no
// prefaulter). Every record still reads and Verify finds nothing.
func TestPrefaultCatchesUpAfterBursts(t *testing.T) {
	const size = 1000
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"64KiB", Options{SegmentBytes: 64 << 10}},
		{"4MiB", Options{SegmentBytes: 4 << 20}},
		{"interval", Options{SegmentBytes: 256 << 10, Sync: SyncInterval, SyncInterval: time.Millisecond}},
		{"always", Options{SegmentBytes: 256 << 10, Sync: SyncAlways}},
		{"recycle", Options{SegmentBytes: 128 << 10, RecycleSegments: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := mustOpen(t, t.TempDir(), c.opts)
			rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
			var slowest time.Duration
			rounds, burst := 60, int(min(2*c.opts.SegmentBytes/size, 2500))
			if c.opts.Sync == SyncAlways {
				rounds, burst = 10, 100
			}
			for round := range rounds {
				for range 1 + rng.IntN(burst) {
					if _, err := l.Append(testBody(l.Next(), size)); err != nil {
						t.Fatal(err)
					}
					if c.opts.Sync == SyncAlways && l.pre.polling.Load() {
						t.Fatal("the prefaulter polls under SyncAlways")
					}
				}
				switch round % 10 {
				case 3:
					if err := l.Truncate(l.Next() - uint64(rng.IntN(int(min(l.Next()-l.First(), 300))))); err != nil {
						t.Fatal(err)
					}
				case 7:
					if _, err := l.DropBefore(l.Next() - uint64(rng.IntN(int(min(l.Next()-l.First(), 50))))); err != nil {
						t.Fatal(err)
					}
				}
				if l.pre.kick != nil {
					slowest = max(slowest, waitCaughtUp(t, l, fmt.Sprintf("round %d", round)))
				}
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
			}
			waitFor(t, "the prefaulter to park", func() bool { return !l.pre.polling.Load() })
			t.Logf("slowest catch-up %v, %d segments made from dropped files", slowest, l.Stats().Recycled)
			for off := l.First(); off < l.Next(); off++ {
				checkRead(t, l, off, size)
			}
			verifyHealthy(t, l, c.name)
		})
	}
}

// Close while the prefaulter polls, over and over: Close returns (it does
// not wait for the polling to end on its own: a minute is taken for a
// hang), no goroutine is left behind, and each reopen trusts the index.
// How long a Close takes is logged, not asserted: on a loaded machine its
// syncs alone can take seconds.
func TestPrefaultCloseWhilePolling(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 2 << 20, IndexIntervalBytes: 64}
	before := runtime.NumGoroutine()
	var slowest time.Duration
	polled := 0
	for cycle := range 40 {
		l, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if rec := l.Recovery(); rec.IndexesRebuilt != 0 || rec.Active.IndexRepaired {
			t.Fatalf("cycle %d: the reopen repaired an index: %+v", cycle, rec)
		}
		for range 1500 + cycle*7 { // past a mark or two
			if _, err := l.Append(testBody(l.Next(), 1000)); err != nil {
				t.Fatal(err)
			}
		}
		if l.pre.polling.Load() {
			polled++
		}
		start := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			buf := make([]byte, 1<<20)
			t.Fatalf("cycle %d: Close while polling (%v) did not return:\n%s", cycle, l.pre.polling.Load(), buf[:runtime.Stack(buf, true)])
		}
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("%d of 40 closes while polling, slowest close %v", polled, slowest)
	for deadline := time.Now().Add(time.Minute); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after 40 open/close cycles:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	}
	l := mustOpen(t, dir, opts)
	verifyHealthy(t, l, "after the cycles")
}

// Fifty logs, each with a short burst past a few marks and a roll: every
// prefaulter catches up and then parks.
func TestPrefaultManyLogsPark(t *testing.T) {
	logs := make([]*Log, 50)
	for i := range logs {
		logs[i] = mustOpen(t, t.TempDir(), Options{SegmentBytes: 256 << 10})
	}
	for _, l := range logs {
		for range 400 {
			if _, err := l.Append(testBody(l.Next(), 1000)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, l := range logs {
		waitCaughtUp(t, l, fmt.Sprintf("log %d", i))
		waitFor(t, fmt.Sprintf("log %d's prefaulter to park", i), func() bool { return !l.pre.polling.Load() })
	}
}

// The prefaulter writes to every page of the index files (a CAS of 0 to
// 0) while the writer fills them, with an entry for every record or every
// few: no entry is changed. The index files hold the sparse rule's
// entries, OffsetForTime answers to the record, Verify finds nothing, and
// reopens after a close and after a crash trust the index.
func TestPrefaultKeepsIndexEntries(t *testing.T) {
	for _, interval := range []int{1, 64} {
		for _, segBytes := range []int64{64 << 10, 1 << 20} {
			t.Run(fmt.Sprintf("interval%d-seg%d", interval, segBytes), func(t *testing.T) {
				dir := t.TempDir()
				const epoch = 1_700_000_000_000
				var clock atomic.Int64 // the append time of the next record: epoch + its offset
				opts := Options{SegmentBytes: segBytes, IndexIntervalBytes: interval,
					now: func() time.Time { return time.UnixMilli(epoch + clock.Load()) }}
				l := mustOpen(t, dir, opts)
				n := int(8 * segBytes / 400)
				var sizes []int
				for range n {
					clock.Store(int64(l.Next()))
					sizes = append(sizes, appendN(t, l, 1, mixedSize)...)
				}
				// Up to two intervals of records, at 16 bytes the least, across
				// a segment boundary.
				slack := uint64(2*(interval/headerSize+1) + 2)
				checkTimes := func(l *Log, what string) {
					t.Helper()
					for off := uint64(0); off < uint64(n); off++ {
						got, err := l.OffsetForTime(time.UnixMilli(epoch + int64(off)))
						if err != nil {
							t.Fatal(err)
						}
						if got > off || got+slack < off {
							t.Fatalf("%s: OffsetForTime(record %d's time) = %d", what, off, got)
						}
					}
				}
				check := func(l *Log, what string) {
					t.Helper()
					checkHealthy(t, l, 0, sizes, what)
					checkTimes(l, what)
				}
				waitCaughtUp(t, l, "after the appends")
				check(l, "open")
				segs := layout(0, sizes, segBytes)
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				checkIndexFiles(t, dir, segs, interval, len(segs)-1)

				l = mustOpen(t, dir, opts)
				if rec := l.Recovery(); rec.IndexesRebuilt != 0 || rec.Active.IndexRepaired {
					t.Fatalf("after a close: the index was repaired: %+v", rec)
				}
				check(l, "reopened")
				crashClose(t, l)

				l = mustOpen(t, dir, opts)
				if rec := l.Recovery(); rec.IndexesRebuilt != 0 || rec.Active.EntriesDropped != 0 {
					t.Fatalf("after a crash: index entries were not trusted: %+v", rec)
				}
				check(l, "after a crash")
			})
		}
	}
}

// Segments made from dropped files get their index pages faulted in too.
func TestPrefaultRecycledIndexResident(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 64, RecycleSegments: 2})
	checked := 0
	for round := 0; checked < 4; round++ {
		if round == 200 {
			t.Fatalf("only %d segments made from dropped files in 200 rolls", checked)
		}
		recycled := l.Stats().Recycled
		for base := l.active.Base(); l.active.Base() == base; {
			if _, err := l.Append(testBody(l.Next(), 1000)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.DropBefore(l.Next()); err != nil {
			t.Fatal(err)
		}
		if l.Stats().Recycled == recycled {
			continue
		}
		checked++
		base := l.active.Base()
		for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
			path := filepath.Join(dir, segment.Name(base, suffix))
			deadline := time.Now().Add(time.Minute)
			for {
				in, all := residentPages(t, path)
				if all == 0 {
					t.Fatalf("round %d: %s is not mapped", round, path)
				}
				if in == all {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: %d of %d pages of %s resident", round, in, all, filepath.Base(path))
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}
