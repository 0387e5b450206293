package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/mmapfile"
)

// ---------------------------------------------------------------------------
// TestConcurrentCallsBesideCloseDropTruncate.
//
// Every public method of a Log, from many goroutines at once, while Close
// comes at a random moment; a read-only Log beside a writable one that
// appends (rolling tiny segments), drops and truncates; and two races of a
// sync with DropBefore and Truncate, made deterministic with the datasync
// hook. Bodies are self-describing (writer, sequence number, attributes
// flag, and bytes derived from them), and every (writer, sequence number)
// is appended once: a served record must be whole, must carry the
// attributes it was appended with, and must be served at the offset its
// Append returned. Errors must come from the documented set: ErrClosed only
// once Close was called, ErrNotFound (ErrTrimmed) for offsets dropped, cut
// or out of range, ErrReadOnly for writes to a read-only log; never
// ErrCorrupt (nothing is damaged) or ErrSyncFailed (no disk fails).

// concurrencySeed returns the seed of this run: PAGELOG_CONCURRENCY_SEED,
// or the clock.
func concurrencySeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PAGELOG_CONCURRENCY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PAGELOG_CONCURRENCY_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (repeat with PAGELOG_CONCURRENCY_SEED=%d)", seed, seed)
	return seed
}

func taggedKey(w byte, seq uint64) uint64 { return uint64(w)<<56 | seq }

// taggedAttrsBody is writer w's record seq: w, the attributes flag, seq, then
// bytes derived from all three.
func taggedAttrsBody(w byte, seq uint64, attrs bool) []byte {
	n := 10 + int((seq*31+uint64(w)*7)%300)
	b := make([]byte, n)
	b[0] = w
	if attrs {
		b[1] = 1
	}
	binary.BigEndian.PutUint64(b[2:], seq)
	for i := 10; i < n; i++ {
		b[i] = byte(seq*13 + uint64(i)*uint64(w+1) + uint64(b[1])*5)
	}
	return b
}

func taggedAttrs(w byte, seq uint64) *Attrs {
	return &Attrs{Group: []byte(fmt.Sprintf("g%d.%d", w, seq%97)), HasDue: true, Due: int64(seq)}
}

// taggedRegistry knows at which offset each (writer, seq) was appended.
type taggedRegistry struct {
	at      sync.Map // key -> offset, once Append returned
	failed  sync.Map // key -> true: Append returned an error
	mu      sync.Mutex
	pending []taggedObs // seen by a reader before its Append returned
}

type taggedObs struct {
	key, off uint64
	who      string
}

func (g *taggedRegistry) appended(w byte, seq, off uint64) { g.at.Store(taggedKey(w, seq), off) }

// check checks a served record: whole, its attributes, its offset.
func (g *taggedRegistry) check(f *caseFailures, who string, off uint64, body []byte, attrs func() (Attrs, error)) {
	if len(body) < 10 {
		f.add("%s: record %d: a body of %d bytes that no Append wrote", who, off, len(body))
		return
	}
	w, seq, hasAttrs := body[0], binary.BigEndian.Uint64(body[2:]), body[1] == 1
	if !bytes.Equal(body, taggedAttrsBody(w, seq, hasAttrs)) {
		f.add("%s: record %d: body is not writer %d's record %d (torn, stale or foreign bytes)", who, off, w, seq)
		return
	}
	a, err := attrs()
	switch {
	case err != nil:
		f.add("%s: record %d: Attrs: %v", who, off, err)
	case hasAttrs:
		want := taggedAttrs(w, seq)
		if !bytes.Equal(a.Group, want.Group) || !a.HasDue || a.Due != want.Due {
			f.add("%s: record %d: attributes %+v, want %+v", who, off, a, *want)
		}
	case !a.Empty():
		f.add("%s: record %d: attributes %+v on a record appended without", who, off, a)
	}
	key := taggedKey(w, seq)
	if v, ok := g.at.Load(key); ok {
		if v.(uint64) != off {
			f.add("%s: writer %d's record %d served at offset %d, its Append returned %d", who, w, seq, off, v)
		}
		return
	}
	g.mu.Lock()
	g.pending = append(g.pending, taggedObs{key, off, who})
	g.mu.Unlock()
}

// finish checks the records seen before their Append returned.
func (g *taggedRegistry) finish(f *caseFailures, unackedOK bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range g.pending {
		if v, ok := g.at.Load(o.key); ok {
			if v.(uint64) != o.off {
				f.add("%s: writer %d's record %d served at offset %d, its Append returned %d", o.who, o.key>>56, o.key&(1<<56-1), o.off, v)
			}
			continue
		}
		if _, failed := g.failed.Load(o.key); failed && unackedOK {
			continue
		}
		f.add("%s: writer %d's record %d served at offset %d, but its Append failed or never returned", o.who, o.key>>56, o.key&(1<<56-1), o.off)
	}
	g.pending = nil
}

// checkCallErr checks that err is one of allowed, or ErrClosed once closing.
func checkCallErr(f *caseFailures, who string, err error, closing *atomic.Bool, allowed ...error) {
	if err == nil {
		return
	}
	for _, a := range allowed {
		if errors.Is(err, a) {
			return
		}
	}
	if errors.Is(err, ErrClosed) {
		if closing != nil && closing.Load() {
			return
		}
		f.add("%s: ErrClosed before Close was called: %v", who, err)
		return
	}
	f.add("%s: undocumented error here: %v", who, err)
}

// heldRecords is a reader's records kept across other calls (and Close).
type heldRecords struct {
	recs   []Record
	bodies [][]byte // copies, to compare with later
}

func (h *heldRecords) keep(r Record) {
	h.recs = append(h.recs, r)
	h.bodies = append(h.bodies, bytes.Clone(r.Body))
}

// recheck: a held record's body must not change until it is released, even
// after its segment was dropped or the log closed.
func (h *heldRecords) recheck(f *caseFailures, who string) {
	for i, r := range h.recs {
		if !bytes.Equal(r.Body, h.bodies[i]) {
			f.add("%s: held record %d changed before its Release", who, r.Offset)
		}
	}
}

func (h *heldRecords) release(n int) {
	for len(h.recs) > n {
		r := h.recs[0]
		c := r
		r.Release()
		c.Release() // a copy: a no-op
		r.Release() // twice: a no-op
		h.recs, h.bodies = h.recs[1:], h.bodies[1:]
	}
}

// concurrentWorld is one log under attack.
type concurrentWorld struct {
	f       *caseFailures
	l       *Log
	reg     *taggedRegistry
	closing atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
	ro      bool
}

func (x *concurrentWorld) stopped() bool {
	select {
	case <-x.stop:
		return true
	default:
		return false
	}
}

// spawn runs fn(rng) in a loop until stop.
func (x *concurrentWorld) spawn(who string, seed uint64, fn func(rng *rand.Rand)) {
	goGuarded(&x.wg, x.f, who, func() {
		rng := rand.New(rand.NewPCG(seed, uint64(len(who))))
		for !x.stopped() {
			fn(rng)
		}
	})
}

// readRandom reads one random offset around [First, Next).
func (x *concurrentWorld) readRandom(who string, rng *rand.Rand, h *heldRecords) {
	l := x.l
	first, next := l.First(), l.Next()
	off := first + rng.Uint64N(next-first+4)
	if off >= 2 {
		off -= 2
	}
	r, err := l.Read(off)
	if err != nil {
		checkCallErr(x.f, who+": Read", err, &x.closing, ErrNotFound)
		return
	}
	if r.Offset != off {
		x.f.add("%s: Read(%d) returned offset %d", who, off, r.Offset)
	}
	x.reg.check(x.f, who+": Read", off, r.Body, r.Attrs)
	concurrentReads.Add(1)
	switch rng.IntN(3) {
	case 0:
		c := r
		c.Release()
		r.Release()
	case 1:
		r.Release()
		r.Release()
	default:
		h.keep(r)
		h.recheck(x.f, who)
		h.release(6)
	}
}

// iterate runs Records and Inspect from a random offset, breaking early.
func (x *concurrentWorld) iterate(who string, rng *rand.Rand) {
	l := x.l
	first, next := l.First(), l.Next()
	from := first + rng.Uint64N(next-first+2)
	if from > 0 && rng.IntN(4) == 0 {
		from -= min(from, uint64(rng.IntN(50)))
	}
	stopAt := rng.IntN(60)
	n, last := 0, int64(-1)
	for r, err := range l.Records(from) {
		if n++; n > stopAt {
			break
		}
		if err != nil {
			checkCallErr(x.f, who+": Records", err, &x.closing, ErrNotFound)
			continue
		}
		if int64(r.Offset) <= last {
			x.f.add("%s: Records(%d) yielded %d after %d", who, from, r.Offset, last)
		}
		last = int64(r.Offset)
		x.reg.check(x.f, who+": Records", r.Offset, r.Body, r.Attrs)
		concurrentIterated.Add(1)
	}
	n = 0
	for ri := range l.Inspect(from) {
		if n++; n > stopAt {
			break
		}
		if !ri.OK {
			if ri.Err == nil {
				x.f.add("%s: Inspect(%d): offset %d not OK without a reason", who, from, ri.Offset)
			} else {
				checkCallErr(x.f, who+": Inspect", ri.Err, &x.closing, ErrNotFound)
			}
			continue
		}
		if ri.Size < headerSize+10 || ri.Position < 0 {
			x.f.add("%s: Inspect: offset %d OK with size %d at %d", who, ri.Offset, ri.Size, ri.Position)
		}
	}
}

// misc calls Verify, OffsetForTime, First, Next, Durable and Recovery.
func (x *concurrentWorld) misc(who string, rng *rand.Rand) {
	l := x.l
	if rng.IntN(8) == 0 {
		rep, err := l.Verify(nil)
		checkCallErr(x.f, who+": Verify", err, &x.closing)
		if err == nil && !rep.Healthy() {
			x.f.add("%s: Verify of an undamaged log: damaged %d, missing %d, problems %q, index problems %q",
				who, rep.Damaged, rep.Missing, firstThreeAndCount(rep.Problems), firstThreeAndCount(rep.IndexProblems))
		}
	}
	t := time.Now().Add(time.Duration(rng.IntN(200)-150) * time.Millisecond)
	off, err := l.OffsetForTime(t)
	checkCallErr(x.f, who+": OffsetForTime", err, &x.closing)
	if next := l.Next(); err == nil && off > next+uint64(1) && !x.closing.Load() {
		// Next may have moved down (Truncate) since: only flag wild answers.
		if off > next+1000 {
			x.f.add("%s: OffsetForTime = %d, far past Next %d", who, off, next)
		}
	}
	if f, n := l.First(), l.Next(); f > n && !x.closing.Load() {
		x.f.add("%s: First %d > Next %d", who, f, n)
	}
	_ = l.Durable()
	_ = l.Recovery()
}

func TestConcurrentCallsBesideCloseDropTruncate(t *testing.T) {
	seed := concurrencySeed(t)
	root := caseScratchRoot(t)
	for round := range 6 {
		if hung.Load() {
			t.Errorf("writable round %d not run: an earlier round left a Close hung (spinning)", round)
			continue
		}
		fails := runGuardedCase(20*time.Second, func(f *caseFailures) {
			concurrentWritableRound(f, filepath.Join(root, fmt.Sprintf("w%d", round)), seed, round)
		})
		for _, m := range fails {
			t.Errorf("writable round %d: %s", round, m)
		}
	}
	for round := range 3 {
		fails := runGuardedCase(20*time.Second, func(f *caseFailures) {
			concurrentReadOnlyRound(f, filepath.Join(root, fmt.Sprintf("r%d", round)), seed, round)
		})
		for _, m := range fails {
			t.Errorf("read-only round %d: %s", round, m)
		}
	}
	t.Logf("rounds: %d appends, %d records read with Read, %d with Records", concurrentAppends.Load(), concurrentReads.Load(), concurrentIterated.Load())
	if concurrentReads.Load() == 0 || concurrentIterated.Load() == 0 || concurrentAppends.Load() == 0 {
		t.Errorf("the rounds read or appended nothing: they tested nothing")
	}
	t.Run("SyncRacingDropBefore", func(t *testing.T) { syncRacingDropBefore(t, caseScratchRoot(t)) })
	t.Run("SyncRacingTruncate", func(t *testing.T) { syncRacingTruncate(t, caseScratchRoot(t)) })
	t.Run("WaitDurableRacingTruncate", func(t *testing.T) { waitDurableRacingTruncate(t, caseScratchRoot(t)) })
}

// hung is set when a round left a Close that never returns: its
// goroutines spin for the rest of the process.
var hung atomic.Bool

// What the rounds did, to show they tested something.
var concurrentReads, concurrentIterated, concurrentAppends atomic.Int64

func concurrentWritableRound(f *caseFailures, dir string, seed uint64, round int) {
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	policy := []SyncPolicy{SyncNone, SyncInterval, SyncAlways}[round%3]
	opts := Options{
		SegmentBytes:       1024 + rng.Int64N(4096),
		IndexIntervalBytes: 32 + rng.IntN(512),
		Sync:               policy,
		SyncInterval:       time.Duration(1+rng.IntN(5)) * time.Millisecond,
	}
	l, err := Open(dir, opts)
	if err != nil {
		f.add("Open: %v", err)
		return
	}
	x := &concurrentWorld{f: f, l: l, reg: &taggedRegistry{}, stop: make(chan struct{})}
	for seq := range uint64(40) {
		off, err := l.AppendWith(taggedAttrsBody(0, seq, seq%2 == 0), map[bool]*Attrs{true: taggedAttrs(0, seq)}[seq%2 == 0])
		if err != nil {
			f.add("prefill: %v", err)
			return
		}
		x.reg.appended(0, seq, off)
	}
	for w := byte(1); w <= 2; w++ {
		seq := uint64(0)
		x.spawn(fmt.Sprintf("appender %d", w), seed+uint64(w), func(rng *rand.Rand) {
			seq++
			withAttrs := rng.IntN(3) == 0
			var attrs *Attrs
			if withAttrs {
				attrs = taggedAttrs(w, seq)
			}
			var off uint64
			var err error
			if withAttrs || rng.IntN(2) == 0 {
				off, err = l.AppendWith(taggedAttrsBody(w, seq, withAttrs), attrs)
			} else {
				off, err = l.Append(taggedAttrsBody(w, seq, false))
			}
			if err != nil {
				x.reg.failed.Store(taggedKey(w, seq), true)
				// Under SyncAlways a Truncate may cut the record before a
				// sync covered it: Append then says it is gone.
				checkCallErr(f, fmt.Sprintf("appender %d: Append", w), err, &x.closing, ErrNotFound)
				time.Sleep(time.Millisecond)
				return
			}
			x.reg.appended(w, seq, off)
			concurrentAppends.Add(1)
		})
	}
	for i := range 2 {
		who := fmt.Sprintf("reader %d", i)
		h := &heldRecords{}
		goGuarded(&x.wg, f, who, func() {
			rng := rand.New(rand.NewPCG(seed, uint64(10+i)))
			for !x.stopped() {
				x.readRandom(who, rng, h)
			}
			// After Close: what is held is still the record it was.
			h.recheck(f, who+" (after Close)")
			h.release(0)
		})
	}
	x.spawn("iterator", seed+20, func(rng *rand.Rand) { x.iterate("iterator", rng) })
	x.spawn("misc", seed+21, func(rng *rand.Rand) { x.misc("misc", rng) })
	x.spawn("syncer", seed+22, func(rng *rand.Rand) {
		if rng.IntN(2) == 0 {
			checkCallErr(f, "syncer: Sync", l.Sync(), &x.closing)
			return
		}
		first, next := l.First(), l.Next()
		off := first + rng.Uint64N(next-first+1)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := l.WaitDurable(ctx, off)
		cancel()
		checkCallErr(f, "syncer: WaitDurable", err, &x.closing, ErrNotFound, context.DeadlineExceeded)
	})
	x.spawn("trimmer", seed+23, func(rng *rand.Rand) {
		time.Sleep(time.Duration(500+rng.IntN(3000)) * time.Microsecond)
		first, next := l.First(), l.Next()
		switch rng.IntN(4) {
		case 0:
			off := next - min(next-first, uint64(rng.IntN(4)))
			checkCallErr(f, fmt.Sprintf("trimmer: Truncate(%d)", off), l.Truncate(off), &x.closing, ErrNotFound)
		default:
			if next-first > 60 {
				_, err := l.DropBefore(first + (next-first)/2)
				checkCallErr(f, "trimmer: DropBefore", err, &x.closing)
			}
		}
	})
	closeErr := make(chan error, 1)
	stop := sync.OnceFunc(func() { close(x.stop) })
	var closed atomic.Bool
	goGuarded(&x.wg, f, "closer", func() {
		time.Sleep(time.Duration(10+rng.IntN(60)) * time.Millisecond)
		x.closing.Store(true)
		// A hang, not a slow Close: under -race beside other builds a
		// Close that syncs and waits for its readers took over 2 s.
		watch := time.AfterFunc(closeHangAfter, func() {
			if !closed.Load() {
				f.add("Close has not returned after %v (%v policy); the goroutines in the engine:\n%s", closeHangAfter, policy, engineGoroutineStacks())
				// Test-only cleanup: let the waiters that spin for an
				// offset no sync will reach go, so that Close can end
				// and the spinning stops.
				l.sync.durable.Store(math.MaxUint64)
				time.AfterFunc(2*time.Second, func() {
					if !closed.Load() {
						hung.Store(true)
					}
				})
			}
			stop()
		})
		err := l.Close()
		closed.Store(true)
		watch.Stop()
		closeErr <- err
		if err != nil {
			f.add("closer: Close: %v", err)
		}
		if err := l.Close(); !errors.Is(err, ErrClosed) {
			f.add("closer: second Close: %v, want ErrClosed", err)
		}
		time.Sleep(5 * time.Millisecond) // everybody meets the closed log
		stop()
	})
	x.wg.Wait()
	x.reg.finish(f, policy == SyncAlways)

	// What is on disk now: every record whole, at the offset its Append
	// returned; the clean close recognized.
	cerr := <-closeErr
	l2, err := Open(dir, Options{})
	if err != nil {
		f.add("reopen: %v", err)
		return
	}
	defer l2.Close()
	if cerr == nil && !l2.Recovery().Clean {
		f.add("reopen after a Close that returned nil: the clean-close marker was not trusted: %s (notes %q)",
			l2.Recovery().Active.CleanMismatch, l2.Recovery().Notes)
	}
	for off := l2.First(); off < l2.Next(); off++ {
		r, err := l2.Read(off)
		if err != nil {
			f.add("reopen: Read(%d): %v", off, err)
			continue
		}
		x.reg.check(f, "reopen", off, r.Body, r.Attrs)
		r.Release()
	}
	x.reg.finish(f, policy == SyncAlways)
	if rep, err := l2.Verify(nil); err != nil || !rep.Healthy() {
		f.add("reopen: Verify: %v, damaged %d missing %d problems %q index problems %q", err, rep.Damaged, rep.Missing,
			firstThreeAndCount(rep.Problems), firstThreeAndCount(rep.IndexProblems))
	}
}

func concurrentReadOnlyRound(f *caseFailures, dir string, seed uint64, round int) {
	rng := rand.New(rand.NewPCG(seed, uint64(100+round)))
	w, err := Open(dir, Options{SegmentBytes: 512 + rng.Int64N(1024), IndexIntervalBytes: 64})
	if err != nil {
		f.add("Open: %v", err)
		return
	}
	reg := &taggedRegistry{}
	seq := uint64(0)
	for ; seq < 200; seq++ {
		off, err := w.Append(taggedAttrsBody(1, seq, false))
		if err != nil {
			f.add("prefill: %v", err)
			return
		}
		reg.appended(1, seq, off)
	}
	r, err := OpenReadOnly(dir, Options{})
	if err != nil {
		f.add("OpenReadOnly: %v", err)
		return
	}
	x := &concurrentWorld{f: f, l: r, reg: reg, stop: make(chan struct{}), ro: true}
	var wstop atomic.Bool
	var writers sync.WaitGroup
	goGuarded(&writers, f, "writer", func() {
		rng := rand.New(rand.NewPCG(seed, 200))
		for !wstop.Load() {
			seq++
			withAttrs := rng.IntN(3) == 0
			var attrs *Attrs
			if withAttrs {
				attrs = taggedAttrs(1, seq)
			}
			off, err := w.AppendWith(taggedAttrsBody(1, seq, withAttrs), attrs)
			if err != nil {
				f.add("writer: Append: %v", err)
				return
			}
			reg.appended(1, seq, off)
			switch {
			case seq%97 == 0:
				first, next := w.First(), w.Next()
				if next-first > 200 {
					if _, err := w.DropBefore(next - 150); err != nil {
						f.add("writer: DropBefore: %v", err)
					}
				}
			case seq%331 == 0:
				if err := w.Truncate(w.Next() - 2); err != nil {
					f.add("writer: Truncate: %v", err)
				}
			}
		}
	})
	for i := range 2 {
		who := fmt.Sprintf("read-only reader %d", i)
		h := &heldRecords{}
		goGuarded(&x.wg, f, who, func() {
			rng := rand.New(rand.NewPCG(seed, uint64(110+i)))
			for !x.stopped() {
				x.readRandom(who, rng, h)
			}
			h.recheck(f, who+" (after Close)")
			h.release(0)
		})
	}
	x.spawn("read-only iterator", seed+120, func(rng *rand.Rand) { x.iterate("read-only iterator", rng) })
	x.spawn("read-only misc", seed+121, func(rng *rand.Rand) { x.misc("read-only misc", rng) })
	x.spawn("read-only writes", seed+122, func(rng *rand.Rand) {
		who := "read-only writes"
		_, err := r.Append([]byte("x"))
		checkCallErr(f, who+": Append", errOrWant(err, ErrReadOnly), &x.closing, ErrReadOnly)
		_, err = r.AppendWith([]byte("x"), taggedAttrs(9, 1))
		checkCallErr(f, who+": AppendWith", errOrWant(err, ErrReadOnly), &x.closing, ErrReadOnly)
		checkCallErr(f, who+": Sync", errOrWant(r.Sync(), ErrReadOnly), &x.closing, ErrReadOnly)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		checkCallErr(f, who+": WaitDurable", errOrWant(r.WaitDurable(ctx, r.First()), ErrReadOnly), &x.closing, ErrReadOnly)
		cancel()
		_, err = r.DropBefore(r.Next())
		checkCallErr(f, who+": DropBefore", errOrWant(err, ErrReadOnly), &x.closing, ErrReadOnly)
		checkCallErr(f, who+": Truncate", errOrWant(r.Truncate(r.First()), ErrReadOnly), &x.closing, ErrReadOnly)
		time.Sleep(200 * time.Microsecond)
	})
	x.spawn("opener", seed+123, func(rng *rand.Rand) {
		// Read-only opens beside the writer, over and over.
		o, err := OpenReadOnly(dir, Options{})
		if err != nil {
			f.add("opener: OpenReadOnly beside a writer: %v", err)
			return
		}
		y := &concurrentWorld{f: f, l: o, reg: reg}
		for range 10 {
			y.readRandom("opener", rng, &heldRecords{})
		}
		y.iterate("opener", rng)
		if rep, err := o.Verify(nil); err != nil || !rep.Healthy() {
			f.add("opener: Verify of a read-only open beside a writer: %v, damaged %d missing %d problems %q index problems %q",
				err, rep.Damaged, rep.Missing, firstThreeAndCount(rep.Problems), firstThreeAndCount(rep.IndexProblems))
		}
		if err := o.Close(); err != nil {
			f.add("opener: Close: %v", err)
		}
	})
	goGuarded(&x.wg, f, "closer", func() {
		time.Sleep(time.Duration(20+rng.IntN(60)) * time.Millisecond)
		x.closing.Store(true)
		if err := r.Close(); err != nil {
			f.add("closer: Close of the read-only log: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
		close(x.stop)
	})
	x.wg.Wait()
	wstop.Store(true)
	writers.Wait()
	reg.finish(f, false)
	if err := w.Close(); err != nil {
		f.add("writer: Close: %v", err)
	}
	// At rest, the log the writer left is whole.
	o, err := OpenReadOnly(dir, Options{})
	if err != nil {
		f.add("at rest: OpenReadOnly: %v", err)
		return
	}
	defer o.Close()
	for off := o.First(); off < o.Next(); off++ {
		r, err := o.Read(off)
		if err != nil {
			f.add("at rest: Read(%d): %v", off, err)
			continue
		}
		reg.check(f, "at rest", off, r.Body, r.Attrs)
		r.Release()
	}
	if rep, err := o.Verify(nil); err != nil || !rep.Healthy() {
		f.add("at rest: Verify: %v, damaged %d missing %d problems %q index problems %q", err, rep.Damaged, rep.Missing,
			firstThreeAndCount(rep.Problems), firstThreeAndCount(rep.IndexProblems))
	}
}

// errOrWant turns a nil error where want was due into one that
// checkCallErr reports.
func errOrWant(err, want error) error {
	if err == nil {
		return fmt.Errorf("nil, want %v", want)
	}
	return err
}

// gatedSyncHook is a datasync that can hold the first call it sees once
// armed, and records which files (by inode) it synced and when.
type gatedSyncHook struct {
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	mu      sync.Mutex
	synced  []gatedSynced
}

type gatedSynced struct {
	name string
	ino  uint64
	seq  int
}

func newGatedSyncHook() *gatedSyncHook {
	return &gatedSyncHook{entered: make(chan struct{}, 1), gate: make(chan struct{})}
}

func (h *gatedSyncHook) datasync(f *os.File) error {
	if h.armed.CompareAndSwap(true, false) {
		h.entered <- struct{}{}
		<-h.gate
	}
	err := mmapfile.Datasync(f)
	if err == nil {
		h.mu.Lock()
		h.synced = append(h.synced, gatedSynced{filepath.Base(f.Name()), openFileInode(f.Name(), f), len(h.synced)})
		h.mu.Unlock()
	}
	return err
}

func openFileInode(name string, f *os.File) uint64 {
	if f != nil {
		if st, err := f.Stat(); err == nil {
			return testkit.Inode(st)
		}
	}
	if st, err := os.Stat(name); err == nil {
		return testkit.Inode(st)
	}
	return 0
}

// syncRacingDropBefore: a Sync that began before DropBefore removed
// segments it still had to sync. Nothing failed on the disk, so the log
// must not end up refusing appends with ErrSyncFailed.
func syncRacingDropBefore(t *testing.T, dir string) {
	h := newGatedSyncHook()
	opts := Options{SegmentBytes: 1024}
	opts.datasync = h.datasync
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for seq := range uint64(40) {
		if _, err := l.Append(taggedAttrsBody(1, seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(logFiles(t, dir)); n < 4 {
		t.Fatalf("only %d segments", n)
	}
	h.armed.Store(true)
	syncErr := make(chan error, 1)
	go func() { syncErr <- l.Sync() }()
	<-h.entered // the sync is under way: it holds the list of sealed segments to sync
	n, derr := l.DropBefore(l.Next() - 1)
	close(h.gate)
	serr := <-syncErr
	_, aerr := l.Append(taggedAttrsBody(1, 100, false))
	s2 := l.Sync()
	if derr != nil || serr != nil || aerr != nil || s2 != nil {
		t.Errorf("Sync racing DropBefore (%d segments dropped): DropBefore %v; the Sync: %v; the next Append: %v; the next Sync: %v "+
			"(nothing failed on the disk: the sync tried to sync segments DropBefore had removed)", n, derr, serr, aerr, s2)
	}
}

// syncRacingTruncate: a Sync that began before Truncate cut the
// records it was covering and finished after new records were appended at
// the same offsets. Durable (and WaitDurable) must not claim the new
// records, which no fdatasync covered.
func syncRacingTruncate(t *testing.T, dir string) {
	h := newGatedSyncHook()
	opts := Options{SegmentBytes: 1 << 20}
	opts.datasync = h.datasync
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for seq := range uint64(10) {
		if _, err := l.Append(taggedAttrsBody(1, seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	h.armed.Store(true)
	syncErr := make(chan error, 1)
	go func() { syncErr <- l.Sync() }() // covers offsets 0-9 of the file as it is now
	<-h.entered
	if err := l.Truncate(5); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(50); seq < 55; seq++ { // offsets 5-9 again, other records
		if _, err := l.Append(taggedAttrsBody(2, seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	before := len(h.synced)
	h.mu.Unlock()
	close(h.gate)
	if err := <-syncErr; err != nil {
		t.Fatalf("Sync: %v", err)
	}
	logName := segment.Name(0, segment.LogSuffix)
	ino := openFileInode(filepath.Join(dir, logName), nil)
	h.mu.Lock()
	covered := false
	for _, s := range h.synced[before:] {
		if s.name == logName && s.ino == ino {
			covered = true
		}
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d := l.Durable(); d > 5 && !covered {
		t.Errorf("Durable is %d, but records 5-9 were appended after a Truncate(5) and no fdatasync of the current %s "+
			"followed them (the sync that finished had started before the Truncate, on the old file)", d, logName)
		h.mu.Lock()
		n := len(h.synced)
		h.mu.Unlock()
		if err := l.WaitDurable(ctx, 9); err == nil {
			h.mu.Lock()
			if len(h.synced) == n {
				t.Errorf("WaitDurable(9) returned nil at once, with no fdatasync: record 9 is not durable")
			}
			h.mu.Unlock()
		}
	}
}

// waitDurableRacingTruncate: a WaitDurable waiting behind a sync
// while Truncate cuts below its offset. It must return (ErrNotFound, or
// nil), not spin forever syncing a log that will never reach the offset.
func waitDurableRacingTruncate(t *testing.T, dir string) {
	h := newGatedSyncHook()
	opts := Options{SegmentBytes: 1 << 20}
	opts.datasync = h.datasync
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	add := func(n int) {
		for range n {
			if _, err := l.Append(taggedAttrsBody(1, l.Next(), false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(8)
	h.armed.Store(true)
	syncErr := make(chan error, 1)
	go func() { syncErr <- l.Sync() }() // a sync covering offsets 0-7, held in fdatasync
	<-h.entered
	add(2)
	waitErr := make(chan error, 1)
	go func() { waitErr <- l.WaitDurable(context.Background(), 9) }()
	time.Sleep(50 * time.Millisecond) // let it wait behind the sync
	if err := l.Truncate(5); err != nil {
		t.Fatal(err)
	}
	close(h.gate)
	if err := <-syncErr; err != nil {
		t.Errorf("Sync: %v", err)
	}
	select {
	case err := <-waitErr:
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Errorf("WaitDurable(9) after Truncate(5): %v", err)
		}
		_ = l.Close()
	case <-time.After(10 * time.Second):
		h.mu.Lock()
		n := len(h.synced)
		h.mu.Unlock()
		t.Errorf("WaitDurable(context.Background(), 9), waiting when Truncate(5) cut the log, has not returned after 10 s "+
			"(%d fdatasyncs run meanwhile: it spins, syncing); the engine's goroutines:\n%s", n, engineGoroutineStacks())
		_ = l.Close() // the closed log makes it return
		select {
		case err := <-waitErr:
			t.Logf("after Close, WaitDurable returned %v", err)
		case <-time.After(2 * time.Second):
			t.Errorf("WaitDurable still has not returned after Close")
		}
	}
}

// closeHangAfter is how long a Close may take before the concurrency test
// calls it hung.
const closeHangAfter = 20 * time.Second
