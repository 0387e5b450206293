package queue

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

var (
	queueSeed  = flag.Uint64("queue.seed", 0, "seed of TestQueueModel; 0 runs a new random seed (printed) and fixed ones")
	queueSteps = flag.Int("queue.steps", 1000, "operations per TestQueueModel run")
)

// TestQueueModel runs random interleavings of Send, SendWith (delays,
// groups, dedup ids), SendBatch, Receive, Delete, DeleteBatch, Discard,
// ChangeVisibility, Release, Redrive, clock advances (some to the exact
// nanosecond of a due time or deadline), Close/reopen and crashes (the
// directories copied while the queue is open, as a kill -9 leaves them)
// against a simple model, and checks every answer, the dead letters and
// the stats after each step. Odd seeds run with MaxReceives 3 (and dead
// letters), even ones without.
func TestQueueModel(t *testing.T) {
	seeds := []uint64{*queueSeed}
	if *queueSeed == 0 {
		seeds = []uint64{rand.Uint64(), 1, 2, 3}
	}
	old := deleteSegmentBytes
	deleteSegmentBytes = 24 * 64 // 64 delete records per segment
	t.Cleanup(func() { deleteSegmentBytes = old })
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := &modelRun{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), clock: newFakeClock(),
				dedup: map[string]*modelDedup{}}
			if seed%2 == 1 {
				r.maxRecv = 3
			}
			defer func() {
				if t.Failed() {
					t.Logf("replay: go test ./queue -run 'TestQueueModel' -queue.seed=%d -queue.steps=%d", seed, *queueSteps)
				}
				if r.q != nil {
					r.q.Close()
				}
			}()
			r.run(*queueSteps)
			r.summary()
		})
	}
}

const (
	modelWindow = 30 * time.Second // DedupWindow
	modelSlack  = time.Second      // how far a rebuilt dedup window may differ (see modelDedup)
)

// modelMsg is the model's view of one message.
type modelMsg struct {
	body, group, dedup string
	due                int64 // Unix ns before which it is not handed out (0: none)
	origin             int64 // the dead letter it was redriven from, -1 when none
	deleted            bool
	dead               bool  // moved to the dead letters
	pendingDead        bool  // used up its receives before a restart: moved once the queue finds it
	handed             bool  // handed out since the queue was (re)opened
	inFlight           bool  // handed, deadline not passed
	deadline           int64 // Unix ns, while in flight
	receives           int
}

// modelDead is one dead letter.
type modelDead struct {
	origin    uint64
	redriven  bool
	body      string
	group     string
	dedup     string
	receives  int
	deadIndex uint64 // its offset in the dead-letter queue
}

// modelDedup is what the model knows of one dedup id: its latest offset;
// a send of the id is surely deduplicated before sure, surely not from
// until on, and either in between (a restart rebuilt the window from the
// time index, measured on the system clock: see rebuildDedup).
type modelDedup struct {
	off         uint64
	sure, until int64
}

type modelRun struct {
	t       *testing.T
	rng     *rand.Rand
	clock   *fakeClock
	maxRecv int
	dir     string
	q       *Queue
	msgs    []modelMsg // index = offset
	dead    []modelDead
	dedup   map[string]*modelDedup
	moved   uint64 // dead-lettered since open
	reopens int
	// dedupHits counts sends deduplicated.
	dedupHits int
	log       []string // the last operations, for a failure report
}

func (r *modelRun) run(steps int) {
	r.dir = r.t.TempDir()
	r.q = openTestQueue(r.t, r.dir, r.clock, r.options)
	for i := 0; i < steps && !r.t.Failed(); i++ {
		switch p := r.rng.IntN(100); {
		case p < 25:
			r.send()
		case p < 28:
			r.sendBatch()
		case p < 52:
			r.receive()
		case p < 64:
			r.delete()
		case p < 67:
			r.deleteBatch()
		case p < 69:
			r.discard()
		case p < 75:
			r.changeVisibility()
		case p < 77:
			r.redrive()
		case p < 94:
			r.advance()
		case p < 97:
			r.reopen(false)
		default:
			r.reopen(true)
		}
		r.syncDead(true)
		r.checkStats()
	}
}

// summary logs what the run did, so that a run that tests little shows.
func (r *modelRun) summary() {
	var delayed, grouped, redriven, deleted int
	for _, m := range r.msgs {
		switch {
		case m.due > 0:
			delayed++
		case m.group != "":
			grouped++
		}
		if m.origin >= 0 {
			redriven++
		}
		if m.deleted {
			deleted++
		}
	}
	r.t.Logf("%d messages (%d delayed, %d grouped, %d redriven, %d deleted), %d dead letters, %d dedup hits, %d reopens",
		len(r.msgs), delayed, grouped, redriven, deleted, len(r.dead), r.dedupHits, r.reopens)
}

func (r *modelRun) options(o *Options) {
	o.Log.SegmentBytes = 8192
	o.CheckpointInterval = 3 * time.Second
	o.MaxReceives = r.maxRecv
	o.DedupWindow = modelWindow
}

func (r *modelRun) note(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
	if len(r.log) > 40 {
		r.log = r.log[1:]
	}
}

func (r *modelRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\nlast operations:\n  %s", fmt.Sprintf(format, args...), strings.Join(r.log, "\n  "))
}

func (r *modelRun) now() int64 { return r.clock.Now().UnixNano() }

// sendOptions picks a message's options: mostly none, sometimes a delay
// (some of them not whole milliseconds), a group, a dedup id.
func (r *modelRun) sendOptions() SendOptions {
	var o SendOptions
	if r.rng.IntN(4) == 0 {
		o.Delay = time.Duration(r.rng.Int64N(int64(20 * time.Second)))
		if r.rng.IntN(2) == 0 {
			o.Delay = o.Delay.Truncate(time.Second)
		}
	}
	if r.rng.IntN(3) == 0 {
		o.Group = []string{"a", "b", "c"}[r.rng.IntN(3)]
	}
	if r.rng.IntN(4) == 0 {
		o.DedupID = fmt.Sprint("x", r.rng.IntN(6))
	}
	return o
}

func (r *modelRun) send() {
	o := r.sendOptions()
	body := fmt.Sprintf("m%d-%x", len(r.msgs), r.rng.Uint32())
	var off uint64
	var err error
	if o == (SendOptions{}) && r.rng.IntN(2) == 0 {
		off, err = r.q.Send([]byte(body))
	} else {
		off, err = r.q.SendWith([]byte(body), o)
	}
	r.note("send %+v -> %d, %v", o, off, err)
	if err != nil {
		r.fail("Send: %v", err)
	}
	now := r.now()
	if d, ok := r.dedup[o.DedupID]; o.DedupID != "" && ok && now < d.until {
		if off == d.off {
			r.dedupHits++
			return // deduplicated
		}
		if now < d.sure {
			r.fail("SendWith of dedup id %s got offset %d; its first send within the window got %d", o.DedupID, off, d.off)
		}
	}
	if off != uint64(len(r.msgs)) {
		r.fail("Send got offset %d, want %d", off, len(r.msgs))
	}
	m := modelMsg{body: body, group: o.Group, dedup: o.DedupID, origin: -1}
	if o.Delay > 0 {
		m.due = ceilMilli(r.clock.Now().Add(o.Delay)) * 1e6
	}
	r.msgs = append(r.msgs, m)
	if o.DedupID != "" {
		exp := now + int64(modelWindow)
		r.dedup[o.DedupID] = &modelDedup{off: off, sure: exp, until: exp}
	}
}

func (r *modelRun) sendBatch() {
	n := 1 + r.rng.IntN(4)
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "b%d-%x", len(r.msgs)+i, r.rng.Uint32())
	}
	first, err := r.q.SendBatch(bodies)
	r.note("send batch of %d -> %d, %v", n, first, err)
	if err != nil || first != uint64(len(r.msgs)) {
		r.fail("SendBatch got (%d, %v), want offset %d", first, err, len(r.msgs))
	}
	for _, b := range bodies {
		r.msgs = append(r.msgs, modelMsg{body: string(b), origin: -1})
	}
}

// expire ends the in-flight messages whose deadline passed: ready again,
// or moved to the dead letters (the timer does it as the clock passes the
// deadline).
func (r *modelRun) expire() {
	now := r.now()
	for i := range r.msgs {
		m := &r.msgs[i]
		if m.inFlight && m.deadline <= now {
			m.inFlight = false
			r.mayDie(uint64(i))
		}
	}
}

// mayDie moves message off, no longer in flight, to the dead letters if
// it used up its receives.
func (r *modelRun) mayDie(off uint64) {
	m := &r.msgs[off]
	if r.maxRecv > 0 && !m.deleted && m.receives >= r.maxRecv {
		m.dead = true
		r.dead = append(r.dead, modelDead{origin: off, body: m.body, group: m.group, dedup: m.dedup, receives: m.receives, deadIndex: ^uint64(0)})
		r.moved++
	}
}

// gone reports whether message i is out of the source queue.
func (m *modelMsg) gone() bool { return m.deleted || m.dead }

// eligible reports whether message i may be handed out now.
func (r *modelRun) eligible(i int) bool {
	m := &r.msgs[i]
	if m.gone() || m.inFlight || m.pendingDead || m.due > r.now() {
		return false
	}
	if m.group != "" {
		for j := range i {
			if p := &r.msgs[j]; p.group == m.group && !p.gone() {
				return false
			}
		}
	}
	return true
}

// expect returns the offset the model hands out next, or -1.
func (r *modelRun) expect() int {
	r.expire()
	for i := range r.msgs {
		if r.eligible(i) {
			return i
		}
	}
	return -1
}

func (r *modelRun) receive() {
	want := r.expect()
	got, ok := tryRecv(r.t, r.q)
	r.note("receive -> %d %v (receives %d)", got.Offset, ok, got.Receives)
	if want < 0 {
		if ok {
			r.fail("Receive handed out %d, the model has nothing ready", got.Offset)
		}
		return
	}
	m := &r.msgs[want]
	m.handed, m.inFlight = true, true
	m.receives++
	deadline := r.clock.Now().Add(testVisibility)
	m.deadline = deadline.UnixNano()
	if !ok || got.Offset != uint64(want) || got.Receives != m.receives || string(got.Body) != m.body ||
		!got.Deadline.Equal(deadline) || got.Group != m.group {
		r.fail("Receive got %v %+v (body %q), want offset %d receives %d body %q deadline %v group %q",
			ok, got, got.Body, want, m.receives, m.body, deadline, m.group)
	}
}

// pick returns an offset to delete: mostly one handed out, sometimes any,
// sometimes beyond the end.
func (r *modelRun) pick() uint64 {
	n := len(r.msgs)
	if r.rng.IntN(4) > 0 {
		var handed []int
		for i, m := range r.msgs {
			if m.handed && !m.gone() {
				handed = append(handed, i)
			}
		}
		if len(handed) > 0 {
			return uint64(handed[r.rng.IntN(len(handed))])
		}
	}
	return uint64(r.rng.IntN(n + 3))
}

// deleteOne applies a Delete of off to the model and says whether the
// queue must refuse it.
func (r *modelRun) deleteOne(off uint64) (refused bool) {
	switch {
	case off >= uint64(len(r.msgs)):
		return true
	case r.msgs[off].gone():
		return false
	case r.msgs[off].handed:
		r.msgs[off].deleted, r.msgs[off].inFlight = true, false
		return false
	}
	return true
}

func (r *modelRun) delete() {
	off := r.pick()
	r.expire()
	err := r.q.Delete(off)
	r.note("delete %d -> %v", off, err)
	if refused := r.deleteOne(off); refused != errors.Is(err, ErrNotInFlight) || !refused && err != nil {
		r.fail("Delete(%d) = %v, want refused %v", off, err, refused)
	}
}

func (r *modelRun) deleteBatch() {
	offs := make([]uint64, 1+r.rng.IntN(5))
	for i := range offs {
		offs[i] = r.pick()
	}
	r.expire()
	err := r.q.DeleteBatch(offs)
	r.note("delete batch %v -> %v", offs, err)
	var refused []uint64
	for _, off := range offs {
		if r.deleteOne(off) {
			refused = append(refused, off)
		}
	}
	if len(refused) > 0 != errors.Is(err, ErrNotInFlight) || len(refused) == 0 && err != nil {
		r.fail("DeleteBatch(%v) = %v, want %v refused", offs, err, refused)
	}
	for _, off := range refused {
		if !strings.Contains(err.Error(), fmt.Sprintf("offset %d ", off)) {
			r.fail("DeleteBatch(%v) = %v: does not name %d", offs, err, off)
		}
	}
}

func (r *modelRun) discard() {
	off := uint64(r.rng.IntN(len(r.msgs) + 2))
	err := r.q.Discard(off)
	r.note("discard %d -> %v", off, err)
	if off >= uint64(len(r.msgs)) {
		if !errors.Is(err, engine.ErrNotFound) {
			r.fail("Discard(%d) beyond the end = %v", off, err)
		}
		return
	}
	if err != nil {
		r.fail("Discard(%d) = %v", off, err)
	}
	if m := &r.msgs[off]; !m.gone() {
		m.deleted, m.inFlight, m.pendingDead = true, false, false
	}
}

func (r *modelRun) changeVisibility() {
	off := r.pick()
	d := []time.Duration{0, time.Second, 3 * testVisibility}[r.rng.IntN(3)]
	release := d == 0 && r.rng.IntN(2) == 0
	r.expire()
	var err error
	if release {
		err = r.q.Release(off)
	} else {
		err = r.q.ChangeVisibility(off, d)
	}
	r.note("change visibility %d %v (release %v) -> %v", off, d, release, err)
	inFlight := off < uint64(len(r.msgs)) && r.msgs[off].inFlight
	if inFlight != (err == nil) || !inFlight && !errors.Is(err, ErrNotInFlight) {
		r.fail("ChangeVisibility(%d, %v) = %v, model in flight: %v", off, d, err, inFlight)
	}
	if !inFlight {
		return
	}
	m := &r.msgs[off]
	if d > 0 {
		m.deadline = r.now() + int64(d)
		return
	}
	m.inFlight = false
	r.mayDie(off)
}

func (r *modelRun) redrive() {
	n := r.rng.IntN(4)
	moved, err := r.q.Redrive(n)
	r.note("redrive %d -> %d, %v", n, moved, err)
	if r.maxRecv == 0 {
		if !errors.Is(err, ErrNoDeadLetters) {
			r.fail("Redrive without dead letters = %v", err)
		}
		return
	}
	var want []int
	for i := range r.dead {
		if !r.dead[i].redriven {
			want = append(want, i)
		}
	}
	slices.SortFunc(want, func(a, b int) int { return int(r.dead[a].deadIndex) - int(r.dead[b].deadIndex) })
	if n > 0 && len(want) > n {
		want = want[:n]
	}
	if err != nil || moved != len(want) {
		r.fail("Redrive(%d) = %d, %v; the model has %d to move", n, moved, err, len(want))
	}
	for _, i := range want {
		d := &r.dead[i]
		d.redriven = true
		r.msgs = append(r.msgs, modelMsg{body: d.body, group: d.group, origin: int64(d.deadIndex)})
	}
}

// advance moves the clock: by a random amount, or to the exact
// nanosecond of a due time or deadline (or 1 ns before it).
func (r *modelRun) advance() {
	d := time.Duration(r.rng.Int64N(int64(testVisibility * 6 / 5)))
	if r.rng.IntN(3) == 0 {
		var at []int64
		for _, m := range r.msgs {
			if m.inFlight {
				at = append(at, m.deadline)
			}
			if !m.gone() && m.due > r.now() {
				at = append(at, m.due)
			}
		}
		if len(at) > 0 {
			d = time.Duration(at[r.rng.IntN(len(at))] - r.now() - r.rng.Int64N(2))
		}
	}
	r.note("advance %v", d)
	r.clock.Advance(d)
	r.expire()
}

// reopen closes and reopens the queue; with crash, the directories are
// copied while the queue is open (what a kill -9 leaves: the page cache)
// and the copies are opened.
func (r *modelRun) reopen(crash bool) {
	r.note("reopen crash=%v", crash)
	r.reopens++
	dir := r.dir
	if crash {
		dir = r.t.TempDir()
		testkit.MustCopyDir(r.t, r.dir, dir, true)
		if r.maxRecv > 0 {
			if err := os.Mkdir(dir+".dead", 0o700); err != nil {
				r.fail("%v", err)
			}
			testkit.MustCopyDir(r.t, r.dir+".dead", dir+".dead", true)
		}
	}
	if err := r.q.Close(); err != nil {
		r.fail("Close: %v", err)
	}
	r.dir = dir
	r.q = openTestQueue(r.t, dir, r.clock, r.options)
	r.syncDead(false) // what the old queue's Close moved
	if rec := r.q.Recovery(); rec.CheckpointError != nil || len(rec.DeleteDamage) > 0 || rec.Lost > 0 || len(rec.ReceiveDamage) > 0 {
		r.fail("recovery after a reopen: %+v", rec)
	}
	r.moved = 0
	now := r.now()
	for i := range r.msgs {
		m := &r.msgs[i]
		m.handed, m.inFlight = false, false
		if r.maxRecv == 0 {
			m.receives = 0
		}
		if !m.gone() && r.maxRecv > 0 && m.receives >= r.maxRecv {
			m.pendingDead = true
		}
	}
	for _, d := range r.dedup {
		d.sure = min(d.sure, d.until-int64(modelSlack))
		d.until = max(d.until, now+int64(modelWindow+modelSlack))
	}
}

// syncDead reads the dead letters appended since the last look, checks
// them against the model, and learns which messages that used up their
// receives before a restart were moved (when is up to the queue's timer).
func (r *modelRun) syncDead(current bool) {
	if r.maxRecv == 0 {
		return
	}
	d := r.q.DeadLetter()
	seen := uint64(0)
	for _, x := range r.dead {
		if x.deadIndex != ^uint64(0) {
			seen = max(seen, x.deadIndex+1)
		}
	}
	if d == nil || d.log == nil {
		r.fail("no dead-letter queue")
	}
	for off := seen; off < d.log.Next(); off++ {
		body, a := recAttrs(r.t, d, off)
		k := slices.IndexFunc(r.dead, func(x modelDead) bool { return x.deadIndex == ^uint64(0) && x.origin == a.Origin })
		if k < 0 {
			m := &r.msgs[a.Origin]
			if !m.pendingDead {
				r.fail("dead letter %d: origin %d was not due to move (%+v)", off, a.Origin, m)
			}
			m.pendingDead, m.dead = false, true
			r.dead = append(r.dead, modelDead{origin: a.Origin, body: m.body, group: m.group, dedup: m.dedup, receives: m.receives})
			k = len(r.dead) - 1
			if current {
				r.moved++
			}
		}
		x := &r.dead[k]
		x.deadIndex = off
		if body != x.body || string(a.Group) != x.group || string(a.Dedup) != x.dedup || !a.HasReceives || int(a.Receives) != x.receives || a.HasDue {
			r.fail("dead letter %d: %q %+v, want %+v", off, body, a, *x)
		}
	}
	for _, x := range r.dead {
		if x.deadIndex == ^uint64(0) {
			r.fail("message %d was to move to the dead letters: not there", x.origin)
		}
	}
}

func (r *modelRun) checkStats() {
	r.expire()
	var inFlight, ready int
	var messages uint64
	head := len(r.msgs)
	for i, m := range r.msgs {
		if m.gone() {
			continue
		}
		messages++
		switch {
		case m.inFlight:
			inFlight++
		case m.handed:
			ready++
		}
		head = min(head, i)
	}
	st := r.q.Stats()
	if st.End != uint64(len(r.msgs)) || st.Head != uint64(head) || st.InFlight != inFlight || st.ReadyAgain != ready ||
		st.Messages != messages || st.DeadLettered != r.moved ||
		st.Cursor < st.Head || st.Cursor > st.End || st.CheckpointError != nil || st.MoveError != nil {
		r.fail("stats %+v, model: end %d head %d in flight %d ready %d messages %d moved %d",
			st, len(r.msgs), head, inFlight, ready, messages, r.moved)
	}
}
