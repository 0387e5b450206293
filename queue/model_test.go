package queue

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

var (
	queueSeed  = flag.Uint64("queue.seed", 0, "seed of TestQueueModel; 0 runs a new random seed (printed) and fixed ones")
	queueSteps = flag.Int("queue.steps", 2000, "operations per TestQueueModel run")
)

// TestQueueModel runs random interleavings of Send, Receive, Delete,
// Discard, clock advances, Close/reopen and crashes (the directory copied
// while the queue is open, as a kill -9 leaves it) against a simple model,
// and checks every answer and the stats after each step.
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
			r := &modelRun{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), clock: newFakeClock()}
			defer func() {
				if t.Failed() {
					t.Logf("replay: go test ./engine -run 'TestQueueModel' -queue.seed=%d -queue.steps=%d", seed, *queueSteps)
				}
				if r.q != nil {
					r.q.Close()
				}
			}()
			r.run(*queueSteps)
		})
	}
}

// modelMsg is the model's view of one message.
type modelMsg struct {
	body     string
	deleted  bool
	handed   bool  // handed out since the queue was (re)opened
	ready    bool  // handed, and its deadline passed
	deadline int64 // Unix ns, while in flight
	receives int
}

type modelRun struct {
	t     *testing.T
	rng   *rand.Rand
	clock *fakeClock
	dir   string
	q     *Queue
	msgs  []modelMsg // index = offset
	log   []string   // the last operations, for a failure report
}

func (r *modelRun) run(steps int) {
	r.dir = r.t.TempDir()
	r.q = openTestQueue(r.t, r.dir, r.clock, modelOptions)
	for i := 0; i < steps && !r.t.Failed(); i++ {
		switch p := r.rng.IntN(100); {
		case p < 30:
			r.send()
		case p < 60:
			r.receive()
		case p < 80:
			r.delete()
		case p < 82:
			r.discard()
		case p < 94:
			r.advance()
		case p < 97:
			r.reopen(false)
		default:
			r.reopen(true)
		}
		r.checkStats()
	}
}

func modelOptions(o *Options) {
	o.Log.SegmentBytes = 8192
	o.CheckpointInterval = 3 * time.Second
}

func (r *modelRun) note(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
	if len(r.log) > 40 {
		r.log = r.log[1:]
	}
}

func (r *modelRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\nlast operations:\n  %s", fmt.Sprintf(format, args...), joinLines(r.log))
}

func joinLines(s []string) string {
	out := ""
	for i, l := range s {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

func (r *modelRun) send() {
	body := fmt.Sprintf("m%d-%x", len(r.msgs), r.rng.Uint32())
	off, err := r.q.Send([]byte(body))
	r.note("send -> %d, %v", off, err)
	if err != nil || off != uint64(len(r.msgs)) {
		r.fail("Send got (%d, %v), want offset %d", off, err, len(r.msgs))
	}
	r.msgs = append(r.msgs, modelMsg{body: body})
}

// expire marks the in-flight messages whose deadline passed ready again.
func (r *modelRun) expire() {
	now := r.clock.Now().UnixNano()
	for i := range r.msgs {
		m := &r.msgs[i]
		if m.handed && !m.ready && !m.deleted && m.deadline <= now {
			m.ready = true
		}
	}
}

// expect returns the offset the model hands out next, or -1.
func (r *modelRun) expect() int {
	r.expire()
	for i, m := range r.msgs {
		if m.ready && !m.deleted {
			return i
		}
	}
	for i, m := range r.msgs {
		if !m.handed && !m.deleted {
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
	m.handed, m.ready = true, false
	m.receives++
	deadline := r.clock.Now().Add(testVisibility)
	m.deadline = deadline.UnixNano()
	if !ok || got.Offset != uint64(want) || got.Receives != m.receives || string(got.Body) != m.body || !got.Deadline.Equal(deadline) {
		r.fail("Receive got %v %+v (body %q), want offset %d receives %d body %q deadline %v",
			ok, got, got.Body, want, m.receives, m.body, deadline)
	}
}

// pick returns an offset to delete: mostly one handed out, sometimes any,
// sometimes beyond the end.
func (r *modelRun) pick() uint64 {
	n := len(r.msgs)
	if r.rng.IntN(4) > 0 {
		var handed []int
		for i, m := range r.msgs {
			if m.handed && !m.deleted {
				handed = append(handed, i)
			}
		}
		if len(handed) > 0 {
			return uint64(handed[r.rng.IntN(len(handed))])
		}
	}
	return uint64(r.rng.IntN(n + 3))
}

func (r *modelRun) delete() {
	off := r.pick()
	r.expire()
	err := r.q.Delete(off)
	r.note("delete %d -> %v", off, err)
	var want error
	switch {
	case off >= uint64(len(r.msgs)):
		want = ErrNotInFlight
	case r.msgs[off].deleted:
	case r.msgs[off].handed:
		r.msgs[off].deleted = true
	default:
		want = ErrNotInFlight
	}
	if !errors.Is(err, want) || (want == nil && err != nil) {
		r.fail("Delete(%d) = %v, want %v", off, err, want)
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
	r.msgs[off].deleted = true
}

func (r *modelRun) advance() {
	d := time.Duration(r.rng.Int64N(int64(testVisibility * 6 / 5)))
	r.note("advance %v", d)
	r.clock.Advance(d)
}

// reopen closes and reopens the queue; with crash, the directory is copied
// while the queue is open (what a kill -9 leaves: the page cache) and the
// copy is opened.
func (r *modelRun) reopen(crash bool) {
	r.note("reopen crash=%v", crash)
	dir := r.dir
	if crash {
		dir = r.t.TempDir()
		copyTree(r.t, r.dir, dir)
	}
	if err := r.q.Close(); err != nil {
		r.fail("Close: %v", err)
	}
	r.dir = dir
	r.q = openTestQueue(r.t, dir, r.clock, modelOptions)
	if rec := r.q.Recovery(); rec.CheckpointError != nil || len(rec.DeleteDamage) > 0 || rec.Lost > 0 {
		r.fail("recovery after a reopen: %+v", rec)
	}
	for i := range r.msgs {
		m := &r.msgs[i]
		m.handed, m.ready, m.receives = false, false, 0
	}
}

func (r *modelRun) checkStats() {
	r.expire()
	var inFlight, ready int
	head := len(r.msgs)
	for i, m := range r.msgs {
		switch {
		case m.deleted:
			continue
		case m.ready:
			ready++
		case m.handed:
			inFlight++
		}
		head = min(head, i)
	}
	st := r.q.Stats()
	if st.End != uint64(len(r.msgs)) || st.Head != uint64(head) || st.InFlight != inFlight || st.ReadyAgain != ready ||
		st.Cursor < st.Head || st.Cursor > st.End || st.CheckpointError != nil {
		r.fail("stats %+v, model: end %d head %d in flight %d ready %d", st, len(r.msgs), head, inFlight, ready)
	}
}

// copyTree copies the regular files of src, and of its directories, into
// dst, which exists.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch {
		case e.IsDir():
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			copyTree(t, s, d)
		case e.Type().IsRegular():
			if err := copyFile(s, d); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
