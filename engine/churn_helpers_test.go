package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A churn is a writer appending to a log of small segments and rolling
// them, while drops, retention, cuts, syncs and evictions run, and
// readers read records (holding some for a while) and check their
// bodies. The tests that run one differ in what the writer does besides
// appending, what the readers hold, what else runs beside them, how
// long it goes and what they check after; churnConfig says all that,
// startChurn starts it and the test ends it.

// churnCase is one case of a test run with several options: the log's
// options, and whether the writer cuts and a dropper drops.
type churnCase struct {
	name     string
	opts     Options
	truncate bool // the writer cuts now and then
	drop     bool // a dropper calls DropBefore
}

// churnConfig is what a churn does.
type churnConfig struct {
	// seed is the second word of every goroutine's random source (the
	// first is the goroutine's own).
	seed uint64

	// body is the body of the record at off appended in generation gen,
	// and check reports what is wrong with a record read at off; nil:
	// generationBody and checkGenerationBody.
	body  func(off uint64, gen uint32) []byte
	check func(r Record, off uint64) error

	// batch is how many records the writer appends at once at most
	// (AppendBatch of 1 to batch records; 0 is 1).
	batch int
	// appendFailed, when not nil, is given a failed AppendBatch's error
	// (after the records it wrote were found where they belong): nil
	// goes on, an error fails the churn. When nil, any error fails it.
	appendFailed func(h *churn, err error) error
	// afterAppend, when not nil, runs in the writer after its i-th
	// batch that wrote them all.
	afterAppend func(h *churn, rng *rand.Rand, i int) error
	// truncateOneIn: the writer cuts (a new generation) after one batch in
	// truncateOneIn at random, up to truncateMax records; 0: never.
	truncateOneIn int
	truncateMax   int

	// drop, when not nil, runs again and again in a dropper of its own,
	// 1 to 3 ms apart; it returns how many segments it dropped.
	drop func(l *Log) (int, error)
	// syncer: a goroutine syncs 0 to 2 ms apart (not under SyncAlways,
	// where every append syncs).
	syncer bool

	readers churnReaders

	// extra are other goroutines the test needs beside the churn; each
	// runs once, and loops until h.stopped().
	extra []func(h *churn, rng *rand.Rand)
}

// churnReaders are the churn's readers of random records.
type churnReaders struct {
	n int
	// span: the records read are in [First, First+span); 0: the whole log.
	span uint64
	// A reader checks a held record again and releases it once it holds
	// more than hold, or at random one time in releaseOneIn.
	hold, releaseOneIn int
	// pause: a reader waits up to pause before it does (so that drops and
	// reuses go on while it holds the records); 0: it does not wait.
	pause time.Duration
	// oldestFirst: the record released is the oldest held; else one at
	// random.
	oldestFirst bool
}

// churn is a running churn.
type churn struct {
	l       *Log
	c       churnConfig
	stop    atomic.Bool
	wg      sync.WaitGroup
	failure firstError
	gen     atomic.Uint32
	// Counts: segments seen made (a new active segment after a batch),
	// records read by the readers, cuts, segments dropped by drop.
	rolled, reads, cuts, drops atomic.Int64
}

// startChurn starts the churn c on l.
func startChurn(l *Log, c churnConfig) *churn {
	if c.body == nil {
		c.body = generationBody
	}
	if c.check == nil {
		c.check = checkGenerationBody
	}
	h := &churn{l: l, c: c}
	h.goRun(&h.wg, 1, h.writer)
	if c.drop != nil {
		h.goRun(&h.wg, 2, h.dropper)
	}
	if c.syncer && l.opts.Sync != SyncAlways {
		h.goRun(&h.wg, 3, h.syncer)
	}
	for i := range c.readers.n {
		h.goRun(&h.wg, uint64(10+i), h.reader)
	}
	for i, f := range c.extra {
		h.goRun(&h.wg, uint64(20+i), func(rng *rand.Rand) { f(h, rng) })
	}
	return h
}

// goRun runs f in a goroutine counted by wg, with a random source of
// its own.
func (h *churn) goRun(wg *sync.WaitGroup, seed uint64, f func(rng *rand.Rand)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f(rand.New(rand.NewPCG(seed, h.c.seed)))
	}()
}

// fail keeps err if it is the first, and stops the churn.
func (h *churn) fail(err error) {
	h.failure.set(err)
	h.stop.Store(true)
}

// stopped reports whether the churn stops (asked to, or failed).
func (h *churn) stopped() bool { return h.stop.Load() }

// err returns the first failure, or nil.
func (h *churn) err() error { return h.failure.get() }

// waitUntil waits until done holds and least has passed, the churn
// failed, or most has passed (a loaded machine does less in the time).
func (h *churn) waitUntil(least, most time.Duration, done func() bool) {
	start := time.Now()
	for !h.stopped() && time.Since(start) < most && (time.Since(start) < least || !done()) {
		time.Sleep(10 * time.Millisecond)
	}
}

// end stops the churn, waits for its goroutines and returns its first
// failure.
func (h *churn) end() error {
	h.stop.Store(true)
	h.wg.Wait()
	return h.err()
}

func (h *churn) writer(rng *rand.Rand) {
	l := h.l
	last := l.activeBase()
	for i := 0; !h.stopped(); i++ {
		off := l.Next()
		bodies := make([][]byte, 1+rng.IntN(max(h.c.batch, 1)))
		for i := range bodies {
			bodies[i] = h.c.body(off+uint64(i), h.gen.Load())
		}
		got, n, err := l.AppendBatch(bodies, nil)
		if n > 0 && got != off || l.Next() != off+uint64(n) {
			h.fail(fmt.Errorf("AppendBatch of %d at %d: %d records at %d, next %d (%v)", len(bodies), off, n, got, l.Next(), err))
			return
		}
		if err != nil {
			if h.c.appendFailed == nil {
				h.fail(fmt.Errorf("AppendBatch at %d: %w", off, err))
				return
			}
			if err := h.c.appendFailed(h, err); err != nil {
				h.fail(err)
				return
			}
			continue
		}
		if n != len(bodies) {
			h.fail(fmt.Errorf("AppendBatch at %d: %d records of %d, and no error", off, n, len(bodies)))
			return
		}
		if b := l.activeBase(); b != last {
			last = b
			h.rolled.Add(1)
		}
		if h.c.afterAppend != nil {
			if err := h.c.afterAppend(h, rng, i); err != nil {
				h.fail(err)
				return
			}
		}
		if h.c.truncateOneIn > 0 && rng.IntN(h.c.truncateOneIn) == 0 {
			first, next := l.First(), l.Next()
			at := next - min(next-first, uint64(1+rng.IntN(h.c.truncateMax)))
			h.gen.Add(1)
			if err := l.Truncate(at); err != nil && !errors.Is(err, ErrNotFound) {
				h.fail(fmt.Errorf("Truncate(%d) of [%d, %d): %w", at, first, next, err))
				return
			}
			h.cuts.Add(1)
		}
	}
}

func (h *churn) dropper(rng *rand.Rand) {
	for !h.stopped() {
		time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond)
		n, err := h.c.drop(h.l)
		if err != nil {
			h.fail(err)
			return
		}
		h.drops.Add(int64(n))
	}
}

func (h *churn) syncer(rng *rand.Rand) {
	for !h.stopped() {
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		if err := h.l.Sync(); err != nil {
			h.fail(fmt.Errorf("Sync: %w", err))
			return
		}
	}
}

// reader reads random records, holds some for a while and checks them
// again before it releases them: a held record never changes, whatever
// is dropped, cut, evicted or reused under it.
func (h *churn) reader(rng *rand.Rand) {
	l, c := h.l, h.c.readers
	var kept []Record
	defer func() {
		for _, r := range kept {
			r.Release()
		}
	}()
	for !h.stopped() {
		first, next := l.First(), l.Next()
		if next <= first {
			continue
		}
		span := next - first
		if c.span > 0 {
			span = min(span, c.span)
		}
		off := first + rng.Uint64N(span)
		r, err := l.Read(off)
		if err != nil {
			if !dropReadErrOK(err) {
				h.fail(fmt.Errorf("Read(%d) of [%d, %d): %w", off, first, next, err))
				return
			}
			continue
		}
		h.reads.Add(1)
		if err := h.c.check(r, off); err != nil {
			r.Release()
			h.fail(fmt.Errorf("Read: %w", err))
			return
		}
		kept = append(kept, r)
		if len(kept) > c.hold || rng.IntN(c.releaseOneIn) == 0 {
			if c.pause > 0 {
				time.Sleep(time.Duration(rng.Int64N(int64(c.pause))))
			}
			k := 0
			if !c.oldestFirst {
				k = rng.IntN(len(kept))
			}
			if err := h.c.check(kept[k], kept[k].Offset); err != nil {
				h.fail(fmt.Errorf("a held record changed: %w", err))
				return
			}
			kept[k].Release()
			kept = append(kept[:k], kept[k+1:]...)
		}
	}
}

// reopenChurned opens dir again (without retention) and checks that it
// holds [first, next) and every record in it passes check; it returns
// the reopened log (closed at the end of the test).
func reopenChurned(t *testing.T, dir string, opts Options, first, next uint64, check func(r Record, off uint64) error) *Log {
	t.Helper()
	opts.RetentionBytes = 0
	r := mustOpen(t, dir, opts)
	if r.First() != first || r.Next() != next {
		t.Fatalf("reopened: [%d, %d), want [%d, %d)", r.First(), r.Next(), first, next)
	}
	want := first
	for rec, err := range r.Records(first) {
		if err != nil {
			t.Fatalf("reopened: Records at %d: %v", want, err)
		}
		if rec.Offset != want {
			t.Fatalf("reopened: Records gave %d, want %d", rec.Offset, want)
		}
		if err := check(rec, want); err != nil {
			t.Fatalf("reopened: %v", err)
		}
		want++
	}
	if want != next {
		t.Fatalf("reopened: Records ended at %d, want %d", want, next)
	}
	return r
}

// paddedGenerationBody returns a body and its check for records of
// generationBody with pad more bytes after it, each the low byte of the
// offset: larger records, whose tail tells whose it is too.
func paddedGenerationBody(pad int) (func(off uint64, gen uint32) []byte, func(r Record, off uint64) error) {
	body := func(off uint64, gen uint32) []byte {
		b := generationBody(off, gen)
		n := len(b)
		b = append(b, make([]byte, pad)...)
		for i := n; i < len(b); i++ {
			b[i] = byte(off)
		}
		return b
	}
	check := func(r Record, off uint64) error {
		if len(r.Body) < pad {
			return fmt.Errorf("record at %d: %d bytes", off, len(r.Body))
		}
		for _, x := range r.Body[len(r.Body)-pad:] {
			if x != byte(off) {
				return fmt.Errorf("record at %d: a tail that is not its own", off)
			}
		}
		r.Body = r.Body[:len(r.Body)-pad]
		return checkGenerationBody(r, off)
	}
	return body, check
}
