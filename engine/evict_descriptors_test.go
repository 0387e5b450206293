package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/mmapfile"
)

// Sealed segments rolled in this process give their .log descriptor back
// when the map cache evicts them, and are mapped again by name. These
// tests run the writer's rolls, drops (with reuse of the dropped files),
// cuts, syncs of every policy and Close beside readers of every kind with
// one or two sealed segments kept mapped, and count the descriptors the
// log holds.

// generationBody is the body of the record at off appended in generation gen: the
// offset, the generation, then bytes derived from both, so that any body
// tells whether it is whole and whose it is.
func generationBody(off uint64, gen uint32) []byte {
	n := 12 + int((off*7919+uint64(gen)*31)%420)
	b := make([]byte, n)
	binary.BigEndian.PutUint64(b, off)
	binary.BigEndian.PutUint32(b[8:], gen)
	for i := 12; i < n; i++ {
		b[i] = byte(uint64(i)*131 + off*7 + uint64(gen)*13)
	}
	return b
}

// checkGenerationBody reports what is wrong with a record read at off: its body must
// be generationBody(off, gen) for the generation it names.
func checkGenerationBody(r Record, off uint64) error {
	if r.Offset != off {
		return fmt.Errorf("record at %d says offset %d", off, r.Offset)
	}
	if len(r.Body) < 12 {
		return fmt.Errorf("record at %d: %d bytes", off, len(r.Body))
	}
	gen := binary.BigEndian.Uint32(r.Body[8:])
	if want := generationBody(off, gen); string(r.Body) != string(want) {
		return fmt.Errorf("record at %d: %d bytes that are not a record appended there (generation %d: %d bytes)", off, len(r.Body), gen, len(want))
	}
	return nil
}

// dropReadErrOK reports whether err is one a read beside drops and cuts may
// give: not found (trimmed, cut) or closed, never damage.
func dropReadErrOK(err error) bool {
	return (errors.Is(err, ErrNotFound) || errors.Is(err, ErrClosed)) && !errors.Is(err, ErrCorrupt)
}

func evictChurnConfigs() []churnCase {
	base := Options{SegmentBytes: 4 << 10}
	with := func(f func(o *Options)) Options { o := base; f(&o); return o }
	return []churnCase{
		{"none-max1", with(func(o *Options) { o.MaxMappedSegments = 1 }), true, true},
		{"none-max1-recycle", with(func(o *Options) { o.MaxMappedSegments = 1; o.RecycleSegments = 2 }), true, true},
		{"interval-max2-recycle", with(func(o *Options) {
			o.MaxMappedSegments = 2
			o.Sync, o.SyncInterval = SyncInterval, time.Millisecond
			o.RecycleSegments = 1
		}), true, true},
		{"always-max1", with(func(o *Options) { o.MaxMappedSegments = 1; o.Sync = SyncAlways }), true, true},
		{"interval-max1-retention", with(func(o *Options) {
			o.MaxMappedSegments = 1
			o.Sync, o.SyncInterval = SyncInterval, 2*time.Millisecond
			o.RetentionBytes = 100 << 10
			o.RecycleSegments = 2
		}), false, false},
	}
}

// quietDescriptorBound is how many descriptors on the log's files a quiet log may
// hold: three for each of the active and prepared segments, the lock,
// and one for each sealed segment kept mapped (as
// TestBoundedMappingsSealedInProcess counts), and slack for the
// notification file and a Truncate's copy.
func quietDescriptorBound(opts Options) int { return 7 + opts.MaxMappedSegments + 3 }

// TestEvictDescriptorsBoundedUnderChurn: a writer rolls 4 KiB segments (and cuts), a
// dropper drops (with reuse), a syncer syncs, and readers read random
// offsets (holding some records for a while), iterate, and follow with
// ReadNext, while one or two sealed segments stay mapped. No read gives
// damage or another record's bytes, no sync fails, the descriptors stay
// bounded while hundreds of segments are rolled, and the log reopens with
// every record.
func TestEvictDescriptorsBoundedUnderChurn(t *testing.T) {
	for _, c := range evictChurnConfigs() {
		t.Run(c.name, func(t *testing.T) {
			runEvictChurn(t, c, 20*time.Second)
		})
	}
}

func runEvictChurn(t *testing.T, c churnCase, d time.Duration) {
	dir := t.TempDir()
	l := mustOpen(t, dir, c.opts)
	var maxFDs atomic.Int64
	// The descriptors on the log's files: bounded, whatever the number of
	// segments rolled. Readers hold up to 4 records each (3 readers), the
	// iterator and the follower one each, a sync one and a Truncate two.
	bound := quietDescriptorBound(c.opts) + 3*4 + 2 + 3 + c.opts.RecycleSegments
	cfg := churnConfig{
		seed:  6,
		batch: 30, // batches: under SyncAlways one sync covers a batch
		// Random readers, some holding records for a while.
		readers: churnReaders{n: 3, hold: 3, releaseOneIn: 3},
		syncer:  true,
		extra: []func(h *churn, rng *rand.Rand){
			evictChurnIterator,
			evictChurnFollower,
			func(h *churn, _ *rand.Rand) {
				for !h.stopped() {
					time.Sleep(5 * time.Millisecond)
					n := int64(openFDs(t, dir))
					if n > maxFDs.Load() {
						maxFDs.Store(n)
					}
					if n > int64(bound) {
						h.fail(fmt.Errorf("%d descriptors open on the log's files (%d segments, %d rolled), want at most %d:\n%s",
							n, l.Stats().Segments, h.rolled.Load(), bound, testkit.DescriptorsUnder(t, dir)))
						return
					}
				}
			},
		},
	}
	if c.truncate {
		cfg.truncateOneIn, cfg.truncateMax = 15, 120
	}
	if c.drop {
		cfg.drop = func(l *Log) (int, error) {
			next := l.Next()
			if next < 900 {
				return 0, nil
			}
			n, err := l.DropBefore(next - 700)
			if err != nil {
				return 0, fmt.Errorf("DropBefore(%d): %w", next-700, err)
			}
			return n, nil
		}
	}
	h := startChurn(l, cfg)
	// Until 120 rolls (at least a second), or d at most: a loaded
	// machine rolls fewer in the same time.
	h.waitUntil(time.Second, d, func() bool { return h.rolled.Load() >= 120 })
	if err := h.end(); err != nil {
		_ = l.Close()
		t.Fatal(err)
	}
	awaitBackgroundSeal(l)
	st := l.Stats()
	t.Logf("%d records, %d segments (%d rolled), %d cuts, %d dropped, %d reads, %d mappings made, at most %d descriptors",
		l.Next(), st.Segments, h.rolled.Load(), h.cuts.Load(), h.drops.Load(), h.reads.Load(), l.cfg.Maps.Maps(), maxFDs.Load())
	if h.rolled.Load() < 40 {
		t.Errorf("only %d segments rolled", h.rolled.Load())
	}
	if n := openFDs(t, dir); n > quietDescriptorBound(c.opts) {
		t.Errorf("quiet: %d descriptors open on the log's files (%d segments), want at most %d:\n%s", n, st.Segments, quietDescriptorBound(c.opts), testkit.DescriptorsUnder(t, dir))
	}
	if st.MappedSegments > c.opts.MaxMappedSegments+1 {
		t.Errorf("quiet: %d segments mapped, want at most %d", st.MappedSegments, c.opts.MaxMappedSegments+1)
	}
	if err := l.Sync(); err != nil {
		t.Errorf("Sync: %v", err)
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Errorf("Verify: %v %+v", err, rep)
	}
	first, next := l.First(), l.Next()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := openFDs(t, dir); n != 0 {
		t.Errorf("after Close: %d descriptors open on the log's files:\n%s", n, testkit.DescriptorsUnder(t, dir))
	}
	reopenChurned(t, dir, c.opts, first, next, checkGenerationBody)
}

// evictChurnIterator iterates with Records from random places.
func evictChurnIterator(h *churn, rng *rand.Rand) {
	l := h.l
	for !h.stopped() {
		first, next := l.First(), l.Next()
		from := first + rng.Uint64N(next-first+1)
		n := 0
		for r, err := range l.Records(from) {
			if err != nil {
				if !dropReadErrOK(err) {
					h.fail(fmt.Errorf("Records(%d): %w", from, err))
					return
				}
				if errors.Is(err, ErrTrimmed) {
					continue
				}
				break
			}
			if err := checkGenerationBody(r, r.Offset); err != nil {
				h.fail(fmt.Errorf("Records(%d): %w", from, err))
				return
			}
			if n++; n > 300 || h.stopped() {
				break
			}
		}
	}
}

// evictChurnFollower follows with ReadNext from the front, and goes back
// to the oldest segments now and then: they map again.
func evictChurnFollower(h *churn, rng *rand.Rand) {
	l := h.l
	off := l.First()
	for !h.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		r, next, err := l.ReadNext(ctx, off)
		cancel()
		switch {
		case err == nil:
			if verr := checkGenerationBody(r, off); verr != nil {
				r.Release()
				h.fail(fmt.Errorf("ReadNext: %w", verr))
				return
			}
			r.Release()
		case errors.Is(err, context.DeadlineExceeded):
		case dropReadErrOK(err):
		default:
			h.fail(fmt.Errorf("ReadNext(%d): %w", off, err))
			return
		}
		off = next
		if rng.IntN(50) == 0 {
			off = l.First()
		}
	}
}

// activeBase returns the base of the active segment (for counting rolls).
func (l *Log) activeBase() uint64 {
	segs := *l.segs.Load()
	return segs[len(segs)-1].Base()
}

// fillGenerationSegments appends records of generation 0 until the log has at least n
// segments, and waits for the last seal.
func fillGenerationSegments(t *testing.T, l *Log, n int) {
	t.Helper()
	for len(*l.segs.Load()) < n {
		off := l.Next()
		if got, err := l.Append(generationBody(off, 0)); err != nil || got != off {
			t.Fatalf("Append(%d): %d, %v", off, got, err)
		}
	}
	awaitBackgroundSeal(l)
}

// rollUntilReused appends (generation 2) until l rolled rolls times,
// then on, a roll at a time with a pause between, until a segment was made
// from a kept file (a minute at most). The preparer reuses a kept file
// only when it gets to it before the roll: on a loaded machine it may not,
// roll after roll (in 1 of 30 runs at load 25, 6 rolls made none).
func rollUntilReused(t *testing.T, l *Log, rolls int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < rolls || l.Stats().Recycled == 0 && time.Now().Before(deadline); i++ {
		if i >= rolls {
			time.Sleep(time.Millisecond)
		}
		b := l.activeBase()
		for l.activeBase() == b {
			off := l.Next()
			if _, err := l.Append(generationBody(off, 2)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkGenerationRecordsFrom reads every record of l from offset from on, checks each
// body (checkGenerationBody), and checks that Verify finds l healthy.
func checkGenerationRecordsFrom(t *testing.T, l *Log, from uint64) {
	t.Helper()
	for off := from; off < l.Next(); off++ {
		r, err := l.Read(off)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if err := checkGenerationBody(r, off); err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
}

// segmentEvicted reports whether s is neither mapped (by /proc/self/maps) nor
// holds a descriptor.
func segmentEvicted(t *testing.T, dir string, s *segment.Segment) bool {
	name := filepath.Base(s.Path())
	return !mappedLogNames(t, dir)[name] && !strings.Contains(testkit.DescriptorsUnder(t, dir).String(), name)
}

// A reader took its reference on an evicted sealed segment (Hold, the
// first half of Acquire) when DropBefore dropped it and renamed its file
// for reuse: mapped again by name after, it finds no file and reads as
// not found, never as damage and never with another segment's bytes; once
// it lets go the file is reused, and the log stays whole.
func TestEvictHeldSegmentDroppedAndRecycledReadsNotFound(t *testing.T) {
	for _, sp := range []SyncPolicy{SyncNone, SyncInterval} {
		t.Run(fmt.Sprint(sp), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1, RecycleSegments: 2, Sync: sp, SyncInterval: time.Millisecond}
			l := mustOpen(t, dir, opts)
			defer l.Close()
			fillGenerationSegments(t, l, 8)
			segs := *l.segs.Load()
			// Reading segs[0] maps it and evicts x. The interval's syncer
			// may hold x meanwhile; its Release then evicts down to the
			// bound, which may take segs[0] instead: read again.
			x := segs[3]
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
				if r, err := l.Read(segs[0].Base()); err != nil {
					t.Fatal(err)
				} else {
					r.Release()
				}
				if segmentEvicted(t, dir, x) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("segment %d still mapped or open:\n%s", x.Base(), testkit.DescriptorsUnder(t, dir))
				}
			}
			if !x.Hold() {
				t.Fatal("Hold")
			}
			released := false
			defer func() {
				if !released {
					x.Release()
				}
			}()
			if _, err := l.DropBefore(segs[5].Base()); err != nil {
				t.Fatal(err)
			}
			// Rolls reuse the other dropped files meanwhile.
			for range 3 {
				b := l.activeBase()
				for l.activeBase() == b {
					off := l.Next()
					if _, err := l.Append(generationBody(off, 1)); err != nil {
						t.Fatal(err)
					}
				}
			}
			awaitBackgroundSeal(l)
			if !x.Acquire() {
				t.Fatal("Acquire")
			}
			x.Release() // the Hold stands for Acquire's reference
			for off := x.Base(); off < x.Next(); off++ {
				v, _, err := x.Read(off)
				if err == nil {
					t.Fatalf("Read(%d) of the dropped segment %d: %d bytes (%x...), want not found", off, x.Base(), len(v.Body), v.Body[:min(12, len(v.Body))])
				}
				if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) {
					t.Fatalf("Read(%d) of the dropped segment %d: %v, want not found", off, x.Base(), err)
				}
			}
			x.Release()
			released = true
			rollUntilReused(t, l, 6)
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			st := l.Stats()
			if st.Recycled == 0 {
				t.Errorf("no dropped file was reused: %+v", st)
			}
			checkGenerationRecordsFrom(t, l, l.First())
		})
	}
}

// countingSyncHook routes the log's datasyncs through fn, when set, and counts
// them by file name.
type countingSyncHook struct {
	mu    sync.Mutex
	names map[string]int
	fn    atomic.Pointer[func(f *os.File) error]
}

func (h *countingSyncHook) datasync(f *os.File) error {
	h.mu.Lock()
	if h.names == nil {
		h.names = map[string]int{}
	}
	h.names[filepath.Base(f.Name())]++
	h.mu.Unlock()
	if p := h.fn.Load(); p != nil {
		if err := (*p)(f); err != nil {
			return err
		}
	}
	return mmapfile.Datasync(f)
}

func (h *countingSyncHook) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.names[name]
}

// Segments sealed under SyncNone wait for the next sync; evicted
// meanwhile, they have no descriptor and are synced by name. Every one of
// them is synced (the hook sees it), and a failed sync of one fails the
// log: Sync reports it, and appends are refused.
func TestEvictPendingSyncOfEvictedSegments(t *testing.T) {
	dir := t.TempDir()
	h := &countingSyncHook{}
	opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1, datasync: h.datasync}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	fillGenerationSegments(t, l, 12)
	segs := *l.segs.Load()
	var pending []string
	for _, s := range segs[:len(segs)-1] {
		pending = append(pending, filepath.Base(s.Path()))
	}
	evicted := 0
	for _, s := range segs[:len(segs)-1] {
		if segmentEvicted(t, dir, s) {
			evicted++
		}
	}
	if evicted < len(pending)-2 {
		t.Fatalf("%d of %d sealed segments evicted", evicted, len(pending))
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, name := range pending {
		if h.count(name) == 0 {
			t.Errorf("%s was sealed under SyncNone and never synced", name)
		}
	}
	// A failing disk under the next evicted segments.
	fillGenerationSegments(t, l, len(segs)+6)
	segs = *l.segs.Load()
	victim := segs[len(segs)-3]
	if !segmentEvicted(t, dir, victim) {
		t.Fatalf("segment %d still mapped or open:\n%s", victim.Base(), testkit.DescriptorsUnder(t, dir))
	}
	bad := errors.New("injected EIO")
	fn := func(f *os.File) error {
		if filepath.Base(f.Name()) == filepath.Base(victim.Path()) {
			return bad
		}
		return nil
	}
	h.fn.Store(&fn)
	err := l.Sync()
	if !errors.Is(err, ErrSyncFailed) || !errors.Is(err, bad) {
		t.Fatalf("Sync with a failing sync of evicted segment %d: %v, want %v", victim.Base(), err, bad)
	}
	if _, err := l.Append([]byte("after")); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Append after a failed sync: %v", err)
	}
	h.fn.Store(nil)
	if err := l.Close(); err != nil && !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Close: %v", err)
	}
	r := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1})
	defer r.Close()
	for off := r.First(); off < r.Next(); off++ {
		rec, err := r.Read(off)
		if err != nil {
			t.Fatalf("reopened: Read(%d): %v", off, err)
		}
		if err := checkGenerationBody(rec, off); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
}

// Close while the writer rolls, a dropper drops (with reuse), syncs of
// evicted sealed segments run (slowed down), and readers read and hold
// records: every call ends with its result or ErrClosed, held records
// stay whole past Close, and once they are let go no descriptor or
// mapping of the log's files is left.
func TestEvictCloseRacingLeavesNoDescriptors(t *testing.T) {
	for round := range 6 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			dir := t.TempDir()
			h := &countingSyncHook{}
			slow := func(f *os.File) error {
				if strings.HasSuffix(f.Name(), segment.LogSuffix) {
					time.Sleep(200 * time.Microsecond)
				}
				return nil
			}
			h.fn.Store(&slow)
			sp := []SyncPolicy{SyncNone, SyncInterval, SyncAlways}[round%3]
			opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1 + round%2, Sync: sp, SyncInterval: time.Millisecond,
				RecycleSegments: round % 2 * 2, datasync: h.datasync}
			l := mustOpen(t, dir, opts)
			fillGenerationSegments(t, l, 10)
			var (
				wg      sync.WaitGroup
				failure firstError
				closed  atomic.Bool
			)
			ok := func(what string, err error) bool {
				if err == nil {
					return true
				}
				if errors.Is(err, ErrClosed) && closed.Load() {
					return false
				}
				if errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) && what != "append" {
					return true
				}
				failure.set(fmt.Errorf("%s: %w", what, err))
				return false
			}
			wg.Add(1)
			go func() { // the writer
				defer wg.Done()
				for !closed.Load() {
					off := l.Next()
					bodies := [][]byte{generationBody(off, 0), generationBody(off+1, 0), generationBody(off+2, 0)}
					if _, _, err := l.AppendBatch(bodies, nil); !ok("append", err) {
						return
					}
				}
			}()
			wg.Add(1)
			go func() { // the dropper and syncer
				defer wg.Done()
				for !closed.Load() {
					if next := l.Next(); next > 400 {
						if _, err := l.DropBefore(next - 300); !ok("DropBefore", err) {
							return
						}
					}
					if sp != SyncAlways {
						if err := l.Sync(); !ok("Sync", err) {
							return
						}
					}
				}
			}()
			var kept [][]Record
			var keptMu sync.Mutex
			for i := range 3 {
				wg.Add(1)
				go func() { // readers; the records they hold outlive Close
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(round), uint64(i)))
					var mine []Record
					defer func() {
						keptMu.Lock()
						kept = append(kept, mine)
						keptMu.Unlock()
					}()
					for !closed.Load() {
						first, next := l.First(), l.Next()
						if next <= first {
							continue
						}
						off := first + rng.Uint64N(next-first)
						r, err := l.Read(off)
						if !ok("Read", err) || err != nil {
							continue
						}
						if err := checkGenerationBody(r, off); err != nil {
							failure.set(err)
						}
						if len(mine) < 5 && rng.IntN(20) == 0 {
							mine = append(mine, r)
						} else {
							r.Release()
						}
					}
				}()
			}
			time.Sleep(time.Duration(100+round*40) * time.Millisecond)
			closed.Store(true)
			if err := l.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			wg.Wait()
			if err := failure.get(); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, mine := range kept {
				for _, r := range mine {
					if err := checkGenerationBody(r, r.Offset); err != nil {
						t.Errorf("a record held past Close: %v", err)
					}
					r.Release()
					n++
				}
			}
			if fds := openFDs(t, dir); fds != 0 {
				t.Errorf("after Close and %d held records released: %d descriptors open on the log's files:\n%s", n, fds, testkit.DescriptorsUnder(t, dir))
			}
			if m := mappedLogNames(t, dir); len(m) != 0 {
				t.Errorf("after Close and %d held records released: %d .log files still mapped: %v", n, len(m), m)
			}
			r := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
			defer r.Close()
			for off := r.First(); off < r.Next(); off++ {
				rec, err := r.Read(off)
				if err != nil {
					t.Fatalf("reopened: Read(%d) of [%d, %d): %v", off, r.First(), r.Next(), err)
				}
				if err := checkGenerationBody(rec, off); err != nil {
					t.Fatalf("reopened: %v", err)
				}
				rec.Release()
			}
		})
	}
}
