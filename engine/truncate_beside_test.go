package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/mmapfile"
)

// Truncate beside readers, appenders, a follower, a failing disk and a
// crash. The segment that holds the cut stays in the list, readable below
// the cut, until its copy replaces it; the records from the cut on are gone
// for readers as soon as the cut position is known.

// truncGenBody is the body of the record at off in generation gen (bumped at
// every cut): a record of an older generation at the same offset is told
// from the current one.
func truncGenBody(off uint64, gen uint32) []byte {
	n := 12 + int((off*7919+uint64(gen)*31)%300)
	b := testBody(off, n)
	b[8], b[9], b[10], b[11] = byte(gen>>24), byte(gen>>16), byte(gen>>8), byte(gen)
	return b
}

// truncSyncHook routes the log's datasyncs (the copy's, the new segment's, the
// directory's) through fn, when set.
type truncSyncHook struct {
	fn atomic.Pointer[func(f *os.File) error]
}

func (h *truncSyncHook) set(fn func(f *os.File) error) { h.fn.Store(&fn) }
func (h *truncSyncHook) clear()                        { h.fn.Store(nil) }

func (h *truncSyncHook) datasync(f *os.File) error {
	if p := h.fn.Load(); p != nil {
		if err := (*p)(f); err != nil {
			return err
		}
	}
	return mmapfile.Datasync(f)
}

// truncGenWriter appends records of a generation and knows which generation
// each offset holds.
type truncGenWriter struct {
	l    *Log
	gen  uint32
	gens []uint32 // by offset - first
	base uint64
}

func (w *truncGenWriter) add(t testing.TB, n int) {
	t.Helper()
	for range n {
		off := w.l.Next()
		got, err := w.l.Append(truncGenBody(off, w.gen))
		if err != nil || got != off {
			t.Fatalf("Append: %d, %v (want %d)", got, err, off)
		}
		w.gens = append(w.gens[:off-w.base], w.gen)
	}
}

func (w *truncGenWriter) want(off uint64) []byte { return truncGenBody(off, w.gens[off-w.base]) }

func (w *truncGenWriter) truncate(t testing.TB, at uint64) {
	t.Helper()
	if err := w.l.Truncate(at); err != nil {
		t.Fatalf("Truncate(%d): %v", at, err)
	}
	w.gens = w.gens[:at-w.base]
	w.gen++
}

// truncCheckRange reads every offset in [from, to) and compares it with want.
func truncCheckRange(l *Log, from, to uint64, want func(uint64) []byte) error {
	for off := from; off < to; off++ {
		r, err := l.Read(off)
		if err != nil {
			return fmt.Errorf("Read(%d) of [%d, %d): %w", off, from, to, err)
		}
		ok := r.Offset == off && bytes.Equal(r.Body, want(off))
		r.Release()
		if !ok {
			return fmt.Errorf("Read(%d): not the record appended there", off)
		}
	}
	return nil
}

// TestTruncateBesideReaders runs readers of every kind beside cuts
// inside the active segment, inside a sealed segment, at a segment base
// and at First, under every sync policy, with one sealed segment mapped
// at most and with recycling. Records below the cut read byte-exact all
// along; after Truncate returns no record at or past the cut is served;
// nothing reports damage.
func TestTruncateBesideReaders(t *testing.T) {
	type cfg struct {
		name string
		opts Options
	}
	cfgs := []cfg{
		{"none", Options{Sync: SyncNone}},
		{"none-map1", Options{Sync: SyncNone, MaxMappedSegments: 1}},
		{"none-map1-recycle", Options{Sync: SyncNone, MaxMappedSegments: 1, RecycleSegments: 2}},
		{"interval-map1", Options{Sync: SyncInterval, SyncInterval: time.Millisecond, MaxMappedSegments: 1}},
		{"always-map1", Options{Sync: SyncAlways, MaxMappedSegments: 1}},
	}
	for _, c := range cfgs {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			opts.SegmentBytes = 4 << 10
			opts.IndexIntervalBytes = 256
			l := mustOpen(t, t.TempDir(), opts)
			w := &truncGenWriter{l: l}
			rng := rand.New(rand.NewPCG(7, uint64(len(c.name))))
			deadline := time.Now().Add(1500 * time.Millisecond)
			for round := 0; round < 40 && time.Now().Before(deadline); round++ {
				w.add(t, 40+rng.IntN(60))
				awaitBackgroundSeal(l)
				segs := *l.segs.Load()
				first, next := l.First(), l.Next()
				var cut uint64
				switch round % 4 {
				case 0: // inside the active segment
					a := segs[len(segs)-1]
					cut = a.Base() + uint64(rng.IntN(int(next-a.Base())))
				case 1: // inside a sealed segment, dropping newer ones
					s := segs[max(0, len(segs)-1-1-rng.IntN(min(3, len(segs)-1)+1))]
					cut = s.Base() + 1 + uint64(rng.IntN(int(max(1, s.Next()-s.Base()-1))))
				case 2: // at a segment base
					cut = segs[max(1, len(segs)-1-rng.IntN(3))%len(segs)].Base()
				case 3:
					if round%8 == 3 {
						cut = first
					} else {
						cut = next - 1
					}
				}
				cut = min(max(cut, first), next)
				if err := truncRound(t, w, cut, rng.Uint64()); err != nil {
					t.Fatalf("round %d (%s, cut %d of [%d, %d), %d segments): %v", round, c.name, cut, first, next, len(segs), err)
				}
			}
			truncReopen(t, w, opts)
		})
	}
}

// truncRound cuts w's log at cut while readers read, and checks what they saw.
func truncRound(t *testing.T, w *truncGenWriter, cut uint64, seed uint64) error {
	l := w.l
	first, next := l.First(), l.Next()
	old := cloneTruncGens(w.gens)
	base := w.base
	oldBody := func(off uint64) []byte { return truncGenBody(off, old[off-base]) }
	var (
		done    atomic.Bool // Truncate returned
		stop    atomic.Bool
		wg      sync.WaitGroup
		failure firstError
	)
	fail := func(format string, a ...any) {
		failure.set(fmt.Errorf(format, a...))
		stop.Store(true)
	}
	// served checks a record served at off: below the cut, the record
	// appended there; at or past it, the old record, and only while the
	// Truncate had not returned before the read began.
	served := func(who string, off uint64, body []byte, after bool) {
		switch {
		case off < first || off >= next:
			fail("%s: served offset %d outside [%d, %d)", who, off, first, next)
		case off >= cut && after:
			fail("%s: served offset %d, cut at %d, after Truncate returned", who, off, cut)
		case !bytes.Equal(body, oldBody(off)):
			fail("%s: offset %d: not the record appended there", who, off)
		}
	}
	bad := func(who string, off uint64, err error, after bool) {
		switch {
		case err == nil:
		case off >= cut && errors.Is(err, ErrNotFound) && !errors.Is(err, ErrTrimmed):
		case off < cut:
			fail("%s: offset %d below the cut at %d: %v", who, off, cut, err)
		default:
			fail("%s: offset %d (cut at %d, after=%v): %v", who, off, cut, after, err)
		}
	}
	span := next - first
	readers := []func(r *rand.Rand){
		func(r *rand.Rand) { // Read
			after := done.Load()
			off := first + r.Uint64N(span)
			rec, err := l.Read(off)
			if err != nil {
				bad("Read", off, err, after)
				return
			}
			served("Read", off, rec.Body, after)
			rec.Release()
		},
		func(r *rand.Rand) { // Records
			after := done.Load()
			from := first + r.Uint64N(span)
			want := from
			for rec, err := range l.Records(from) {
				if err != nil {
					if rec.Offset < cut || !errors.Is(err, ErrNotFound) {
						fail("Records from %d: at %d: %v", from, rec.Offset, err)
					}
					return
				}
				if rec.Offset != want {
					fail("Records from %d: yielded %d, want %d", from, rec.Offset, want)
					return
				}
				served("Records", rec.Offset, rec.Body, after)
				want++
				if stop.Load() {
					return
				}
			}
			if want < cut && !stop.Load() {
				fail("Records from %d ended at %d, below the cut at %d", from, want, cut)
			}
		},
		func(r *rand.Rand) { // ReadNext
			after := done.Load()
			off := first + r.Uint64N(span)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			rec, nx, err := l.ReadNext(ctx, off)
			if err != nil {
				if off < cut && !errors.Is(err, context.DeadlineExceeded) {
					fail("ReadNext(%d): %v (next %d)", off, err, nx)
				}
				return
			}
			served("ReadNext", off, rec.Body, after)
			rec.Release()
		},
		func(r *rand.Rand) { // Inspect
			after := done.Load()
			from := first + r.Uint64N(span)
			n := 0
			for ri := range l.Inspect(from) {
				if !ri.OK && ri.Offset < cut {
					fail("Inspect from %d: offset %d below the cut: %v", from, ri.Offset, ri.Err)
					return
				}
				if after && ri.Offset >= cut {
					fail("Inspect from %d: offset %d past the cut at %d after Truncate returned", from, ri.Offset, cut)
					return
				}
				if n++; n > 50 || stop.Load() {
					return
				}
			}
		},
		func(r *rand.Rand) { // OffsetForTime, Stats, Wait
			after := done.Load()
			o, err := l.OffsetForTime(time.Now().Add(time.Duration(r.IntN(3)-1) * time.Hour))
			if err != nil || o > next || (after && o > cut) {
				fail("OffsetForTime: %d, %v (Next was %d, cut %d, after=%v)", o, err, next, cut, after)
			}
			st := l.Stats()
			if st.First > st.Next || st.Next > next || (after && st.Next != cut) {
				fail("Stats: First %d Next %d (Next was %d, cut %d, after=%v)", st.First, st.Next, next, cut, after)
			}
			if cut > first {
				off := first + r.Uint64N(cut-first)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				err := l.Wait(ctx, off)
				cancel()
				if err != nil {
					fail("Wait(%d) below the cut: %v", off, err)
				}
			}
		},
		func(r *rand.Rand) { // WaitDurable
			if cut == first {
				return
			}
			off := first + r.Uint64N(cut-first)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			err := l.WaitDurable(ctx, off)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				fail("WaitDurable(%d) below the cut: %v", off, err)
			}
		},
		func(r *rand.Rand) { // Verify: never damage on a healthy log
			rep, err := l.Verify(nil)
			if err != nil || rep.Damaged > 0 || rep.Missing > 0 {
				fail("Verify beside Truncate: %v, %d damaged, %d missing: %v %v", err, rep.Damaged, rep.Missing, rep.FirstDamage, rep.Problems)
			}
		},
	}
	for i, rd := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			for n := 0; !stop.Load(); {
				if done.Load() {
					if n++; n > 3 {
						return
					}
				}
				rd(r)
			}
		}()
	}
	time.Sleep(time.Millisecond)
	err := l.Truncate(cut)
	done.Store(true)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return fmt.Errorf("Truncate(%d): %w", cut, err)
	}
	wg.Wait()
	w.gens = w.gens[:cut-w.base]
	w.gen++
	if err := failure.get(); err != nil {
		return err
	}
	if l.Next() != cut {
		return fmt.Errorf("Next %d after Truncate(%d)", l.Next(), cut)
	}
	if err := truncCheckRange(l, first, cut, w.want); err != nil {
		return err
	}
	if _, err := l.Read(cut); !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("Read(%d) at the cut: %v", cut, err)
	}
	return nil
}

func cloneTruncGens(s []uint32) []uint32 { return append([]uint32(nil), s...) }

// truncReopen closes w's log, opens it again and checks every record.
func truncReopen(t *testing.T, w *truncGenWriter, opts Options) {
	t.Helper()
	dir := w.l.Dir()
	next := w.l.Next()
	if err := w.l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	l := mustOpen(t, dir, Options{})
	if l.Next() != next {
		t.Fatalf("after a reopen: Next %d, want %d", l.Next(), next)
	}
	if err := truncCheckRange(l, l.First(), next, w.want); err != nil {
		t.Fatalf("after a reopen: %v", err)
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("after a reopen: Verify: %v %+v", err, rep)
	}
}

// TestTruncateBesideAppenders: appenders under SyncAlways wait for
// syncs of records that a concurrent Truncate cuts. An Append either
// succeeds or fails with an error matching ErrNotFound; nothing fails on
// the disk, so no ErrSyncFailed, and a reopen finds the log the writer
// left.
func TestTruncateBesideAppenders(t *testing.T) {
	for _, mapped := range []int{0, 1} {
		t.Run(fmt.Sprint("map", mapped), func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{Sync: SyncAlways, SegmentBytes: 4 << 10, MaxMappedSegments: mapped})
			var stop atomic.Bool
			var wg sync.WaitGroup
			var failure firstError
			fail := func(err error) {
				failure.set(err)
				stop.Store(true)
			}
			var cutErrs atomic.Int64
			for a := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !stop.Load(); i++ {
						body := []byte(fmt.Sprintf("a%d-%d-%s", a, i, strings.Repeat("x", i%200)))
						if _, err := l.Append(body); err != nil {
							if !errors.Is(err, ErrNotFound) {
								fail(fmt.Errorf("appender %d: %w", a, err))
								return
							}
							cutErrs.Add(1)
						}
					}
				}()
			}
			rng := rand.New(rand.NewPCG(3, uint64(mapped)))
			deadline := time.Now().Add(time.Second)
			cuts := 0
			for time.Now().Before(deadline) && !stop.Load() {
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				next := l.Next()
				if next < 5 {
					continue
				}
				at := next - 1 - rng.Uint64N(min(next-1, 40))
				if err := l.Truncate(max(at, l.First())); err != nil && !errors.Is(err, ErrNotFound) {
					fail(fmt.Errorf("Truncate(%d): %w", at, err))
				}
				cuts++
			}
			stop.Store(true)
			wg.Wait()
			if err := failure.get(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d cuts, %d appends cut while they waited", cuts, cutErrs.Load())
			if d, n := l.Durable(), l.Next(); d > n {
				t.Fatalf("Durable %d past Next %d", d, n)
			}
			next := l.Next()
			var bodies [][]byte
			for r, err := range l.Records(l.First()) {
				if err != nil {
					t.Fatalf("Records: %v", err)
				}
				bodies = append(bodies, bytes.Clone(r.Body))
			}
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// Every record the log held reads the same after a reopen. (Its
			// Next is checked from below only here; that a cut moves the
			// recovery point down is TestTruncateRecoveryPointStaysBelowCut's.)
			r := mustOpen(t, dir, Options{})
			if r.Next() < next {
				t.Fatalf("reopen: Next %d, want at least %d", r.Next(), next)
			}
			for i := range bodies {
				off := r.First() + uint64(i)
				rec, err := r.Read(off)
				if err != nil || !bytes.Equal(rec.Body, bodies[i]) {
					t.Fatalf("reopen: record %d: %v", off, err)
				}
				rec.Release()
			}
		})
	}
}

// TestTruncateReadDuringCopyOfLiveSegment: a Read of a record below the cut,
// made while the copy is synced and again after it was renamed over the
// file (the new segment's sync), finds it, for segments sealed in this
// process with one mapped at most.
func TestTruncateReadDuringCopyOfLiveSegment(t *testing.T) {
	for _, atBase := range []bool{false, true} {
		t.Run(fmt.Sprint("atBase=", atBase), func(t *testing.T) {
			dir := t.TempDir()
			var h truncSyncHook
			opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1}
			opts.datasync = h.datasync
			l := mustOpen(t, dir, opts)
			w := &truncGenWriter{l: l}
			w.add(t, 200)
			awaitBackgroundSeal(l)
			truncReadDuringCopy(t, w, &h, atBase)
		})
	}
}

// truncReadDuringCopy cuts inside (or at the base of) a sealed segment in the
// middle of w's log, and reads below the cut from the datasync hooks of
// the copy and of the new segment, after evicting the segment being cut.
func truncReadDuringCopy(t *testing.T, w *truncGenWriter, h *truncSyncHook, atBase bool) {
	l := w.l
	segs := *l.segs.Load()
	k := len(segs) / 2
	cut := segs[k].Base() + 3
	held := segs[k] // the segment whose copy replaces it
	if atBase {
		cut = segs[k].Base()
		held = segs[k-1]
	}
	logName := filepath.Base(held.Path())
	var errs []string
	probe := func(when string) {
		// Evict the segment being cut (a read of another one maps it),
		// then read below the cut in it.
		checkRead := func(off uint64) {
			r, err := l.Read(off)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: Read(%d), below the cut at %d: %v", when, off, cut, err))
				return
			}
			if !bytes.Equal(r.Body, w.want(off)) {
				errs = append(errs, fmt.Sprintf("%s: Read(%d): not the record appended there", when, off))
			}
			r.Release()
		}
		checkRead(segs[0].Base())
		checkRead(segs[0].Base() + 1)
		checkRead(held.Base() + 1)
		if o, err := l.OffsetForTime(time.Now().Add(time.Hour)); err != nil || o > cut {
			errs = append(errs, fmt.Sprintf("%s: OffsetForTime past the end: %d, %v (cut at %d)", when, o, err, cut))
		}
		if _, err := l.Read(cut); !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Sprintf("%s: Read(%d) at the cut: %v", when, cut, err))
		}
	}
	var copied bool
	probes := 0
	h.set(func(f *os.File) error {
		switch name := filepath.Base(f.Name()); {
		case name == logName+".tmp":
			copied = true
			probes++
			probe("during the copy's sync")
		case name == logName && copied:
			copied = false
			probes++
			probe("after the rename, during the new segment's sync")
		}
		return nil
	})
	w.truncate(t, cut)
	h.clear()
	if probes != 2 {
		t.Fatalf("the reads ran from %d of the 2 syncs (the copy's, then the new segment's): the hook missed them", probes)
	}
	if len(errs) > 0 {
		t.Fatal(strings.Join(errs, "\n"))
	}
	if err := truncCheckRange(l, l.First(), cut, w.want); err != nil {
		t.Fatal(err)
	}
}

// TestTruncateFollowerThroughCuts: a log opened read-only in the same
// process follows a writer that cuts at every kind of position and
// appends records of a new generation; a reader of it reads all along.
// Every record it serves is whole, and once it catches up it serves the
// writer's records, never a cut one.
func TestTruncateFollowerThroughCuts(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 256}
	wl := mustOpen(t, dir, opts)
	w := &truncGenWriter{l: wl}
	w.add(t, 100)
	ro := mustOpenRO(t, dir, Options{MaxMappedSegments: 1})
	// A stream's reader: it has waited once. (One that never waits, at a
	// cut that removes the two newest segments, is
	// TestTruncateDeepCutKeepsFollower's.)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	if err := ro.Wait(ctx, ro.Next()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past the end: %v", err)
	}
	cancel()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Pointer[string]
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		for !stop.Load() {
			first, next := ro.First(), ro.Next()
			if next <= first {
				continue
			}
			off := first + r.Uint64N(next-first)
			rec, err := ro.Read(off)
			if err != nil {
				if !errors.Is(err, ErrNotFound) {
					s := fmt.Sprintf("follower Read(%d): %v", off, err)
					bad.CompareAndSwap(nil, &s)
				}
				continue
			}
			b := rec.Body
			if len(b) < 12 || !bytes.Equal(b, truncGenBody(off, uint32(b[8])<<24|uint32(b[9])<<16|uint32(b[10])<<8|uint32(b[11]))) {
				s := fmt.Sprintf("follower Read(%d): a body that is no generation's record at that offset", off)
				bad.CompareAndSwap(nil, &s)
			}
			rec.Release()
		}
	}()
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 30 {
		segs := *wl.segs.Load()
		next := wl.Next()
		var cut uint64
		switch round % 3 {
		case 0:
			cut = next - 1 - rng.Uint64N(min(10, next-wl.First()))
		case 1:
			cut = segs[len(segs)/2].Base() + 2
		case 2:
			cut = segs[len(segs)-1].Base()
		}
		cut = max(cut, wl.First())
		w.truncate(t, cut)
		w.add(t, 20+rng.IntN(60))
		if round%5 == 4 {
			if _, err := wl.DropBefore(wl.Next() - 150); err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(time.Minute)
		for ro.Next() != wl.Next() || ro.First() != wl.First() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the follower holds [%d, %d), the writer [%d, %d)", round, ro.First(), ro.Next(), wl.First(), wl.Next())
			}
			time.Sleep(time.Millisecond)
		}
		if err := truncCheckRange(ro, ro.First(), ro.Next(), func(off uint64) []byte {
			if off < w.base {
				return nil
			}
			return w.want(off)
		}); err != nil {
			t.Fatalf("round %d (cut %d): follower: %v", round, cut, err)
		}
		for off := ro.Next(); off < ro.Next()+3; off++ {
			if _, err := ro.Read(off); !errors.Is(err, ErrNotFound) {
				t.Fatalf("round %d: follower Read(%d) past the end: %v", round, off, err)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	if p := bad.Load(); p != nil {
		t.Fatal(*p)
	}
}

// TestTruncateCrashLeavesPrefix copies the directory at each sync of a
// Truncate (the copy written, the copy renamed, the directory) as a crash
// there would leave it, and opens each copy: a prefix of the log, at
// least every record below the cut, never a gap.
func TestTruncateCrashLeavesPrefix(t *testing.T) {
	for _, where := range []string{"active", "sealed", "base"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			var h truncSyncHook
			opts := Options{SegmentBytes: 4 << 10, Sync: SyncAlways}
			opts.datasync = h.datasync
			l := mustOpen(t, dir, opts)
			w := &truncGenWriter{l: l}
			w.add(t, 150)
			segs := *l.segs.Load()
			var cut uint64
			switch where {
			case "active":
				cut = l.Next() - 2
			case "sealed":
				cut = segs[len(segs)/2].Base() + 4
			case "base":
				cut = segs[len(segs)/2].Base()
			}
			before := cloneTruncGens(w.gens)
			next := l.Next()
			var copies []string
			var names []string
			h.set(func(f *os.File) error {
				c := crashScratchDir(t)
				testkit.MustCopyDir(t, dir, c, false)
				copies = append(copies, c)
				names = append(names, filepath.Base(f.Name()))
				return nil
			})
			w.truncate(t, cut)
			h.clear()
			if len(copies) == 0 {
				t.Fatal("no sync during Truncate")
			}
			for i, c := range copies {
				r, err := Open(c, Options{})
				if err != nil {
					t.Fatalf("crash at the sync of %s: Open: %v", names[i], err)
				}
				got := r.Next()
				if got < cut || got > next {
					r.Close()
					t.Fatalf("crash at the sync of %s: Next %d outside [cut %d, %d]", names[i], got, cut, next)
				}
				if err := truncCheckRange(r, r.First(), got, func(off uint64) []byte { return truncGenBody(off, before[off]) }); err != nil {
					r.Close()
					t.Fatalf("crash at the sync of %s: %v", names[i], err)
				}
				if rep, err := r.Verify(nil); err != nil || !rep.Healthy() {
					r.Close()
					t.Fatalf("crash at the sync of %s: Verify: %v %+v", names[i], err, rep)
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d crash points: %v", len(copies), names)
		})
	}
}

// TestTruncateFailedCopyKeepsPrefix: the copy fails (no space). The log
// refuses appends, reads below the cut fault nothing, Close returns, and
// a reopen finds every record below the cut.
func TestTruncateFailedCopyKeepsPrefix(t *testing.T) {
	for _, where := range []string{"active", "sealed"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			var h truncSyncHook
			opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1}
			opts.datasync = h.datasync
			l, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			w := &truncGenWriter{l: l}
			w.add(t, 150)
			awaitBackgroundSeal(l)
			segs := *l.segs.Load()
			cut := l.Next() - 3
			if where == "sealed" {
				cut = segs[len(segs)/2].Base() + 4
			}
			h.set(func(f *os.File) error {
				if strings.HasSuffix(f.Name(), ".tmp") {
					return syscall.ENOSPC
				}
				return nil
			})
			if err := l.Truncate(cut); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Truncate(%d) with a failing copy: %v", cut, err)
			}
			h.clear()
			if _, err := l.Append([]byte("x")); err == nil {
				t.Fatal("Append after a failed Truncate succeeded")
			}
			// Reads below the cut: a record or an error, never a fault.
			for off := l.First(); off < cut; off++ {
				if r, err := l.Read(off); err == nil {
					if !bytes.Equal(r.Body, w.want(off)) {
						t.Fatalf("Read(%d) after a failed Truncate: not the record appended there", off)
					}
					r.Release()
				}
			}
			if err := l.Close(); err != nil {
				t.Logf("Close after a failed Truncate: %v", err)
			}
			r := mustOpen(t, dir, Options{})
			if r.Next() < cut {
				t.Fatalf("reopen after a failed Truncate(%d): Next %d", cut, r.Next())
			}
			if err := truncCheckRange(r, r.First(), cut, w.want); err != nil {
				t.Fatalf("reopen after a failed Truncate(%d): %v", cut, err)
			}
			if rep, err := r.Verify(nil); err != nil || !rep.Healthy() {
				t.Fatalf("reopen after a failed Truncate: Verify: %v %+v", err, rep)
			}
		})
	}
}
