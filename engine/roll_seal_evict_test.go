package engine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/mmapfile"
)

// Segments sealed by a roll in this process join the log's map cache: they
// are evicted when no reader holds them and mapped again on use. These
// tests read, hold, drop, cut, recycle, sync and close such segments while
// the writer keeps rolling 4 KiB segments with one or two kept mapped.

// sealEvictSize is the body size of the record at off: deterministic, so
// that a record cut by Truncate and appended again has the same bytes.
func sealEvictSize(off uint64) int { return 100 + int(off*7919%400) }

// sealEvictAppend appends the record of offset l.Next().
func sealEvictAppend(l *Log) error {
	want := l.Next()
	off, err := l.Append(testBody(want, sealEvictSize(want)))
	if err == nil && off != want {
		return fmt.Errorf("Append: offset %d, want %d", off, want)
	}
	return err
}

// sealEvictCheck reports whether a record read at off holds the bytes appended
// there.
func sealEvictCheck(r Record, off uint64) error {
	if r.Offset != off || !bytes.Equal(r.Body, testBody(off, sealEvictSize(off))) {
		return fmt.Errorf("record at %d: offset %d, %d bytes that differ from the %d appended", off, r.Offset, len(r.Body), sealEvictSize(off))
	}
	return nil
}

// awaitBackgroundSeal waits for the background seal of the last roll.
func awaitBackgroundSeal(l *Log) {
	l.mu.Lock()
	l.awaitSeal()
	l.mu.Unlock()
}

// sealEvictReopen closes l, opens dir again and checks every record from
// First to Next, with Read, Records and Verify.
func sealEvictReopen(t *testing.T, l *Log, dir string, opts Options) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	opts.RetentionAge, opts.RetentionBytes = 0, 0
	r := mustOpen(t, dir, opts)
	defer r.Close()
	first, next := r.First(), r.Next()
	for off := first; off < next; off++ {
		rec, err := r.Read(off)
		if err != nil {
			t.Fatalf("after a reopen: Read(%d) of [%d, %d): %v", off, first, next, err)
		}
		if err := sealEvictCheck(rec, off); err != nil {
			t.Fatalf("after a reopen: %v", err)
		}
		rec.Release()
	}
	want := first
	for rec, err := range r.Records(first) {
		if err != nil {
			t.Fatalf("after a reopen: Records at %d: %v", want, err)
		}
		if err := sealEvictCheck(rec, want); err != nil {
			t.Fatalf("after a reopen: Records: %v", err)
		}
		want++
	}
	if want != next {
		t.Fatalf("after a reopen: Records ended at %d, want %d", want, next)
	}
	if rep, err := r.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("after a reopen: Verify: %v %+v", err, rep)
	}
}

// sealEvictChurn is what the writer does besides appending.
type sealEvictChurn struct {
	drop, truncate bool
	keep           uint64 // records DropBefore keeps (300 when 0)
}

// sealEvictRun runs a writer that keeps rolling, readers of every kind,
// and the churn asked for (what), for at least d and 60 records and until done
// holds, and fails t with the first failure. It returns how many records
// were appended.
func sealEvictRun(t *testing.T, l *Log, what sealEvictChurn, d time.Duration, seed uint64, done func() bool) int {
	t.Helper()
	var appended atomic.Int64
	cfg := churnConfig{
		seed:  seed,
		body:  func(off uint64, _ uint32) []byte { return testBody(off, sealEvictSize(off)) },
		check: sealEvictCheck,
		// The writer cuts, drops and syncs between appends.
		afterAppend: func(h *churn, rng *rand.Rand, i int) error {
			appended.Add(1)
			switch {
			case what.truncate && i%97 == 96:
				next := l.Next()
				to := next - 1 - rng.Uint64N(40)
				if first := l.First(); to < first || to > next {
					return nil
				}
				if err := l.Truncate(to); err != nil {
					return fmt.Errorf("Truncate(%d): %w", to, err)
				}
			case what.drop && i%53 == 52:
				keep := cmp.Or(what.keep, 300)
				if next := l.Next(); next > keep {
					if _, err := l.DropBefore(next - keep); err != nil {
						return fmt.Errorf("DropBefore: %w", err)
					}
				}
			case i%71 == 70:
				if err := l.Sync(); err != nil {
					return fmt.Errorf("Sync: %w", err)
				}
			}
			return nil
		},
	}
	for range 2 {
		cfg.extra = append(cfg.extra, func(h *churn, rng *rand.Rand) { sealEvictReader(h, rng, what) })
	}
	h := startChurn(l, cfg)
	// At least d, and at least six rolls' worth of records (SyncAlways
	// appends slowly on a loaded machine) and until done holds (nil: at
	// once); a minute at most, a hang.
	h.waitUntil(d, time.Minute, func() bool { return appended.Load() >= 60 && (done == nil || done()) })
	if !h.stopped() && (appended.Load() < 60 || done != nil && !done()) {
		t.Errorf("after a minute: %d records appended, done %v", appended.Load(), done == nil || done())
	}
	if err := h.end(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records appended, %d segments made from kept files", appended.Load(), l.Stats().Recycled)
	return int(appended.Load())
}

// sealEvictReader reads with every kind of read (some records held for
// a while), Inspect, OffsetForTime, Stats and, now and then, Verify.
func sealEvictReader(h *churn, rng *rand.Rand, what sealEvictChurn) {
	l := h.l
	// allowed says whether err may be what a read of off gets: only when
	// records go (drops, cuts), and then only ErrNotFound, never
	// ErrCorrupt.
	allowed := func(err error) bool {
		if errors.Is(err, ErrCorrupt) {
			return false
		}
		return (what.drop || what.truncate) && errors.Is(err, ErrNotFound)
	}
	var held []Record
	defer func() {
		for _, r := range held {
			r.Release()
		}
	}()
	for i := 0; !h.stopped(); i++ {
		first, next := l.First(), l.Next()
		if next <= first {
			continue
		}
		off := first + rng.Uint64N(next-first)
		switch i % 8 {
		case 0, 1, 2, 3: // Read, some held for a while
			r, err := l.Read(off)
			if err != nil {
				if !allowed(err) {
					h.fail(fmt.Errorf("Read(%d) of [%d, %d): %w", off, first, next, err))
				}
				continue
			}
			if err := sealEvictCheck(r, off); err != nil {
				h.fail(err)
				r.Release()
				continue
			}
			held = append(held, r)
			if len(held) > 6 {
				k := rng.IntN(len(held))
				if err := sealEvictCheck(held[k], held[k].Offset); err != nil {
					h.fail(fmt.Errorf("a held record changed: %w", err))
				}
				held[k].Release()
				held = append(held[:k], held[k+1:]...)
			}
		case 4: // Records
			n := 0
			for r, err := range l.Records(off) {
				if err != nil {
					if !allowed(err) && !errors.Is(err, ErrTrimmed) {
						h.fail(fmt.Errorf("Records(%d) at %d: %w", off, r.Offset, err))
						return
					}
					continue
				}
				if err := sealEvictCheck(r, r.Offset); err != nil {
					h.fail(fmt.Errorf("Records(%d): %w", off, err))
					return
				}
				if n++; n == 40 {
					break
				}
			}
		case 5: // Inspect, OffsetForTime, ReadNext
			n := 0
			for ri := range l.Inspect(off) {
				if !ri.OK && !(what.drop || what.truncate) {
					h.fail(fmt.Errorf("Inspect(%d) at %d: %+v", off, ri.Offset, ri))
					return
				}
				if n++; n == 40 {
					break
				}
			}
			if _, err := l.OffsetForTime(time.Now().Add(-time.Duration(rng.IntN(50)) * time.Millisecond)); err != nil {
				h.fail(fmt.Errorf("OffsetForTime: %w", err))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			r, _, err := l.ReadNext(ctx, off)
			cancel()
			if err == nil {
				if err := sealEvictCheck(r, r.Offset); err != nil {
					h.fail(fmt.Errorf("ReadNext(%d): %w", off, err))
				}
				r.Release()
			} else if !allowed(err) && !errors.Is(err, context.DeadlineExceeded) {
				h.fail(fmt.Errorf("ReadNext(%d): %w", off, err))
			}
		case 6: // Stats
			st := l.Stats()
			if st.MappedSegments < 0 || l.cfg.Maps.Mapped() < 0 {
				h.fail(fmt.Errorf("Stats: %d segments mapped, the map cache says %d", st.MappedSegments, l.cfg.Maps.Mapped()))
			}
		case 7: // Verify, now and then
			if i%64 != 7 {
				continue
			}
			rep, err := l.Verify(nil)
			if err != nil {
				h.fail(fmt.Errorf("Verify: %w", err))
			} else if rep.Damaged > 0 || !(what.drop || what.truncate) && !rep.Healthy() {
				h.fail(fmt.Errorf("Verify: %+v", rep))
			}
		}
	}
}

// TestSealEvictReadersSeeEveryRecord: every sync policy, one or two sealed
// segments kept mapped, plain appends or with DropBefore and Truncate
// (into segments sealed in this process, most of them evicted) beside the
// readers; then a reopen finds every record.
func TestSealEvictReadersSeeEveryRecord(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncInterval, SyncAlways} {
		for _, churn := range []sealEvictChurn{{}, {drop: true, truncate: true}} {
			max := 1
			if churn.drop {
				max = 2
			}
			t.Run(fmt.Sprintf("%s/max%d/churn%v", policy, max, churn.drop), func(t *testing.T) {
				dir := t.TempDir()
				opts := Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 512, MaxMappedSegments: max,
					Sync: policy, SyncInterval: 2 * time.Millisecond}
				l := mustOpen(t, dir, opts)
				// 4 KiB segments hold about ten records.
				if n := sealEvictRun(t, l, churn, 300*time.Millisecond, uint64(policy)*2+uint64(max), nil); n < 60 {
					t.Fatalf("only %d records appended", n)
				}
				sealEvictReopen(t, l, dir, opts)
			})
		}
	}
}

// TestSealEvictRecycledAndRetired: the work queue's settings (mappings
// retired to zero pages, dropped files reused) with retention dropping
// segments sealed in this process and evicted, and their files reused.
func TestSealEvictRecycledAndRetired(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncInterval} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 512, MaxMappedSegments: 1,
				Sync: policy, SyncInterval: 2 * time.Millisecond, RecycleSegments: 2, RetireMappings: true,
				RetentionBytes: 16 << 10}
			l := mustOpen(t, dir, opts)
			// Until a file was reused: the preparer that reuses them runs
			// beside the writer, and may be late on a loaded machine.
			sealEvictRun(t, l, sealEvictChurn{drop: true, truncate: true, keep: 30}, 300*time.Millisecond, 7,
				func() bool { return l.Stats().Recycled > 0 })
			if st := l.Stats(); st.Recycled == 0 {
				t.Fatalf("no file was reused: %+v", st)
			}
			sealEvictReopen(t, l, dir, opts)
		})
	}
}

// mappedLogNames returns the .log files of dir this process maps (removed
// ones too), but for the prepared segment's (the next segment, made
// ahead).
func mappedLogNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range testkit.MapsUnder(t, dir) {
		name := m.Path[len(dir)+1:]
		if strings.HasSuffix(name, segment.LogSuffix) && !strings.HasPrefix(name, segment.PreparedPrefix) {
			seen[name] = true
		}
	}
	return seen
}

// TestSealEvictStatsMatchMaps: once the log is quiet, the mapped
// segments Stats counts are the .log files /proc/self/maps shows, under
// every sync policy, after rolls, reads of old segments, held records,
// drops and a Truncate.
func TestSealEvictStatsMatchMaps(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncInterval, SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 2, Sync: policy}
			l := mustOpen(t, dir, opts)
			check := func(when string) {
				t.Helper()
				awaitBackgroundSeal(l)
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				st := l.Stats()
				maps := mappedLogNames(t, dir)
				if st.MappedSegments != len(maps) || st.MappedSegments < 1 {
					t.Fatalf("%s: Stats says %d segments mapped, /proc/self/maps shows %d .log files: %v", when, st.MappedSegments, len(maps), maps)
				}
			}
			for range 300 {
				if err := sealEvictAppend(l); err != nil {
					t.Fatal(err)
				}
			}
			check("after the rolls")
			var held []Record
			for off := uint64(0); off < l.Next(); off += 37 {
				r, err := l.Read(off)
				if err != nil {
					t.Fatal(err)
				}
				if off%(37*3) == 0 {
					held = append(held, r)
				} else {
					r.Release()
				}
			}
			check("with records held")
			if _, err := l.DropBefore(100); err != nil {
				t.Fatal(err)
			}
			check("after a drop of held segments")
			for _, r := range held {
				if err := sealEvictCheck(r, r.Offset); err != nil {
					t.Fatal(err)
				}
				r.Release()
			}
			check("after the held records went")
			if err := l.Truncate(l.Next() - 30); err != nil {
				t.Fatal(err)
			}
			check("after a Truncate")
			for range 100 {
				if err := sealEvictAppend(l); err != nil {
					t.Fatal(err)
				}
			}
			checkRead(t, l, l.First(), sealEvictSize(l.First()))
			check("after more rolls")
			sealEvictReopen(t, l, dir, opts)
		})
	}
}

// TestSealEvictTruncateIntoEvicted: Truncate into a segment sealed in
// this process and evicted (and to its base, and into the one before),
// with a record of it held across the cut; then appends, a reopen.
func TestSealEvictTruncateIntoEvicted(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncAlways} {
		for _, recycle := range []int{0, 2} {
			if policy == SyncAlways && recycle > 0 {
				continue
			}
			t.Run(fmt.Sprintf("%s/recycle%d", policy, recycle), func(t *testing.T) {
				dir := t.TempDir()
				opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1, Sync: policy, RecycleSegments: recycle}
				l := mustOpen(t, dir, opts)
				for range 200 {
					if err := sealEvictAppend(l); err != nil {
						t.Fatal(err)
					}
				}
				if recycle > 0 {
					if _, err := l.DropBefore(40); err != nil {
						t.Fatal(err)
					}
					for range 100 {
						if err := sealEvictAppend(l); err != nil {
							t.Fatal(err)
						}
					}
				}
				awaitBackgroundSeal(l)
				segs := *l.segs.Load()
				target := segs[len(segs)/2]
				held, err := l.Read(target.Base() + 2)
				if err != nil {
					t.Fatal(err)
				}
				// Map every other segment, so that the target's
				// mapping (held) stays and the others go.
				for _, s := range segs[:len(segs)-1] {
					checkRead(t, l, s.Base(), sealEvictSize(s.Base()))
				}
				if m := mappedLogNames(t, dir); !m[segment.Name(target.Base(), segment.LogSuffix)] {
					t.Fatalf("the held segment is not mapped: %v", m)
				}
				cuts := []uint64{target.Base() + 3, target.Base(), target.Base() - 1}
				for _, cut := range cuts {
					if err := l.Truncate(cut); err != nil {
						t.Fatalf("Truncate(%d): %v", cut, err)
					}
					if l.Next() != cut {
						t.Fatalf("Next %d after Truncate(%d)", l.Next(), cut)
					}
					for off := l.First(); off < cut; off++ {
						checkRead(t, l, off, sealEvictSize(off))
					}
					if err := sealEvictCheck(held, target.Base()+2); err != nil {
						t.Fatalf("a held record of a cut segment changed: %v", err)
					}
					for range 60 {
						if err := sealEvictAppend(l); err != nil {
							t.Fatal(err)
						}
					}
				}
				held.Release()
				if st := l.Stats(); st.MappedSegments > 1+1+2 {
					t.Fatalf("%d segments mapped", st.MappedSegments)
				}
				sealEvictReopen(t, l, dir, opts)
			})
		}
	}
}

// TestSealEvictRetentionAgeUsesSealTime: retention by age of segments with
// no time-index entry (smaller than the index interval) goes by their seal
// time on the log's clock, and an eviction and a mapping again keep it:
// the file's modification time (the wall clock) never takes its place.
func TestSealEvictRetentionAgeUsesSealTime(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncAlways} {
		for _, past := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/past%v", policy, past), func(t *testing.T) {
				dir := t.TempDir()
				// The log's clock, a day from the wall clock: seal
				// times taken from the files would be a day off.
				start := time.Now().Add(24 * time.Hour).UnixMilli()
				if past {
					start = time.Now().Add(-24 * time.Hour).UnixMilli()
				}
				var ms atomic.Int64
				ms.Store(start)
				opts := Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 1 << 20, MaxMappedSegments: 1, Sync: policy}
				opts.now = func() time.Time { return time.UnixMilli(ms.Load()) }
				l := mustOpen(t, dir, opts)
				// Ten segments, the clock a minute on at each.
				for len(*l.segs.Load()) < 11 {
					before := len(*l.segs.Load())
					if err := sealEvictAppend(l); err != nil {
						t.Fatal(err)
					}
					if len(*l.segs.Load()) != before {
						ms.Add(60_000)
					}
				}
				awaitBackgroundSeal(l)
				segs := *l.segs.Load()
				for i, s := range segs[:len(segs)-1] {
					if n, _, _, ok := s.TimeEnd(); ok && n > 0 {
						t.Fatalf("segment %d has %d time-index entries", i, n)
					}
				}
				// Every sealed segment mapped again after an eviction.
				for round := range 2 {
					for _, s := range segs[:len(segs)-1] {
						checkRead(t, l, s.Base()+uint64(round), sealEvictSize(s.Base()+uint64(round)))
					}
				}
				for i, s := range segs[:len(segs)-1] {
					got, ok := s.NewestTime()
					if !ok || got < start || got > ms.Load() {
						t.Fatalf("segment %d: NewestTime %d %v, want the log's clock in [%d, %d]", i, got, ok, start, ms.Load())
					}
				}
				// Keep segments sealed in the last 4.5 minutes of
				// the log's clock: the oldest six go.
				l.opts.RetentionAge = 4*time.Minute + 30*time.Second
				n, err := l.retain()
				if err != nil {
					t.Fatal(err)
				}
				if n != 6 {
					t.Fatalf("retention dropped %d segments, want 6", n)
				}
				if l.First() != segs[6].Base() {
					t.Fatalf("First %d, want %d", l.First(), segs[6].Base())
				}
			})
		}
	}
}

// TestSealEvictSyncReachesEvicted: sealed segments evicted before their
// deferred sync are synced by Sync (their files, through the descriptor
// kept, without mapping them again), and a Sync racing the background
// seal of each roll neither fails nor misses a segment.
func TestSealEvictSyncReachesEvicted(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncInterval} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			var mu sync.Mutex
			synced := map[string]int{}
			opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1, Sync: policy, SyncInterval: time.Hour}
			opts.datasync = func(f *os.File) error {
				mu.Lock()
				synced[strings.TrimPrefix(f.Name(), dir+"/")]++
				mu.Unlock()
				return mmapfile.Datasync(f)
			}
			l := mustOpen(t, dir, opts)
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // a reader that maps old segments, evicting the others
				defer wg.Done()
				for i := uint64(0); !stop.Load(); i++ {
					if next := l.Next(); next > 0 {
						off := i * 13 % next
						if r, err := l.Read(off); err == nil {
							r.Release()
						}
					}
				}
			}()
			var syncs int
			for i := 0; i < 400; i++ {
				if err := sealEvictAppend(l); err != nil {
					t.Fatal(err)
				}
				if i%50 == 49 {
					// A Sync racing the background seal of the roll.
					if err := l.Sync(); err != nil {
						t.Fatal(err)
					}
					syncs++
				}
			}
			stop.Store(true)
			wg.Wait()
			before := l.Stats().MappedSegments
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if d, n := l.Durable(), l.Next(); d != n {
				t.Fatalf("Durable %d after Sync, Next %d", d, n)
			}
			if after := l.Stats().MappedSegments; after > before {
				t.Fatalf("Sync mapped sealed segments: %d mapped before, %d after", before, after)
			}
			segs := *l.segs.Load()
			mu.Lock()
			defer mu.Unlock()
			for _, s := range segs[:len(segs)-1] {
				if name := segment.Name(s.Base(), segment.LogSuffix); synced[name] == 0 {
					t.Fatalf("sealed segment %s never synced (%d syncs)", name, syncs)
				}
			}
		})
	}
}

// TestSealEvictCloseKeepsAcknowledged: Close while the writer rolls
// (background seals in flight), readers map and evict sealed segments and
// hold records; the reopened log holds every record an Append
// acknowledged.
func TestSealEvictCloseKeepsAcknowledged(t *testing.T) {
	deadline := time.Now().Add(3 * time.Second)
	round := 0
	for ; round < 24 && time.Now().Before(deadline); round++ {
		policy := []SyncPolicy{SyncNone, SyncInterval, SyncAlways}[round%3]
		dir := t.TempDir()
		opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1 + round%2, Sync: policy, SyncInterval: time.Millisecond}
		l := mustOpen(t, dir, opts)
		var acked atomic.Uint64
		var wg sync.WaitGroup
		var failure firstError
		fail := failure.set
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := sealEvictAppend(l); err != nil {
					if !errors.Is(err, ErrClosed) {
						fail(fmt.Errorf("Append: %w", err))
					}
					return
				}
				acked.Store(l.next.Load())
			}
		}()
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				var held []Record
				defer func() {
					for _, r := range held {
						if err := sealEvictCheck(r, r.Offset); err != nil {
							fail(fmt.Errorf("a record held across Close changed: %w", err))
						}
						r.Release()
					}
				}()
				for {
					next := l.next.Load()
					if next == 0 {
						if l.closed.Load() {
							return // closed before the first append
						}
						continue
					}
					off := rng.Uint64N(next)
					r, err := l.Read(off)
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						fail(fmt.Errorf("Read(%d): %w", off, err))
						return
					}
					if err := sealEvictCheck(r, off); err != nil {
						fail(err)
					}
					if len(held) < 4 {
						held = append(held, r)
					} else {
						r.Release()
					}
				}
			}()
		}
		time.Sleep(time.Duration(20+round*5) * time.Millisecond)
		if err := l.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		wg.Wait()
		if err := failure.get(); err != nil {
			t.Fatalf("round %d (%s): %v", round, policy, err)
		}
		if l.cfg.Maps.Mapped() != 0 {
			t.Fatalf("round %d: the map cache counts %d segments after Close", round, l.cfg.Maps.Mapped())
		}
		if m := mappedLogNames(t, dir); len(m) != 0 {
			t.Fatalf("round %d: .log files mapped after Close: %v", round, m)
		}
		r := mustOpen(t, dir, opts)
		if r.Next() < acked.Load() {
			t.Fatalf("round %d: reopened with Next %d, below the %d acknowledged", round, r.Next(), acked.Load())
		}
		sealEvictReopen(t, r, dir, opts)
	}
	t.Logf("%d rounds", round)
}

// TestSealEvictFollowerKeepsUp: a read-only log of the same directory
// follows the writer (ReadNext, waiting for each record) while the writer
// rolls, its readers evict the segments it sealed, and a Sync now and
// then syncs them; both keep one sealed segment mapped.
func TestSealEvictFollowerKeepsUp(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncInterval} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1, Sync: policy, SyncInterval: time.Millisecond}
			l := mustOpen(t, dir, opts)
			if err := sealEvictAppend(l); err != nil {
				t.Fatal(err)
			}
			f := mustOpenRO(t, dir, Options{MaxMappedSegments: 1})
			const total = 400
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var held []Record
				defer func() {
					for _, r := range held {
						r.Release()
					}
				}()
				for off := uint64(0); off < total; {
					r, next, err := f.ReadNext(ctx, off)
					if err != nil {
						errc <- fmt.Errorf("follower: ReadNext(%d): %w", off, err)
						return
					}
					if err := sealEvictCheck(r, off); err != nil {
						errc <- fmt.Errorf("follower: %w", err)
						return
					}
					if off%50 == 0 {
						held = append(held, r)
					} else {
						r.Release()
					}
					off = next
				}
				for _, r := range held {
					if err := sealEvictCheck(r, r.Offset); err != nil {
						errc <- fmt.Errorf("follower: a held record changed: %w", err)
						return
					}
				}
				errc <- nil
			}()
			rng := rand.New(rand.NewPCG(3, 4))
			for i := 1; i < total; i++ {
				if err := sealEvictAppend(l); err != nil {
					t.Fatal(err)
				}
				off := rng.Uint64N(l.Next())
				checkRead(t, l, off, sealEvictSize(off)) // maps old segments, evicting the others
				if i%40 == 0 {
					if err := l.Sync(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if _, err := f.Verify(nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// firstError keeps the first error set on it, from any goroutine.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
