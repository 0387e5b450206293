package fuzz

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/queue"
)

// queueVisibility is the Visibility of the fuzzed queues.
const queueVisibility = 10 * time.Second

// Operations of FuzzQueueOps: each input byte's value mod 8 (after the
// first byte, which picks the sync policy), most followed by one argument
// byte.
const (
	qSend    = iota // n: send a body of n%32 bytes
	qReceive        // receive without blocking
	qDelete         // k: delete a message handed out (k picks which), or any offset
	qDiscard        // k: discard offset k mod (end+2)
	qAdvance        // k: move the clock by k/16 of the visibility
	qReopen         // close and reopen
	qCrash          // copy the directory while the queue is open (kill -9) and open the copy
	qStats          // check the stats (they are also checked after every operation)
)

// FuzzQueueOps runs an operation sequence decoded from the input on a
// Queue with a fake clock and checks every answer against a model of the
// Queue's documented promises: messages are handed out lowest ready-again
// offset first, else in order; no deleted message is ever handed out
// again, across reopens and crashes too; no message is handed out twice
// while its deadline has not passed; Receive hands out something whenever
// the model has something ready, and its body, receive count and deadline
// are right; Delete and Discard answer as documented; Stats agree with the
// model after every operation.
func FuzzQueueOps(f *testing.F) {
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		m := &queueModel{t: t, clock: newFakeClock(), dir: filepath.Join(t.TempDir(), "q")}
		m.policy = []engine.SyncPolicy{engine.SyncNone, engine.SyncInterval, engine.SyncAlways}[int(ops[0])%3]
		m.open()
		defer func() {
			if m.q != nil {
				_ = m.q.Close()
			}
		}()
		r := progReader{b: ops[1:]}
		reopens := 0
		for steps := 0; r.more() && steps < 300; steps++ {
			switch op := r.byte() % 8; op {
			case qSend:
				m.send(int(r.byte() % 32))
			case qReceive:
				m.receive()
			case qDelete:
				m.delete(r.byte())
			case qDiscard:
				m.discard(r.byte())
			case qAdvance:
				d := time.Duration(r.byte()) * queueVisibility / 16
				m.note("advance %v", d)
				m.clock.Advance(d)
			case qReopen, qCrash:
				if reopens++; reopens <= 6 {
					m.reopen(op == qCrash)
				}
			case qStats:
			}
			m.checkStats()
		}
	})
}

// queueMsg is the model's view of one message.
type queueMsg struct {
	body     string
	deleted  bool
	handed   bool  // handed out since the queue was (re)opened
	ready    bool  // handed, and its deadline passed
	deadline int64 // Unix ns, while in flight
	receives int
}

type queueModel struct {
	t      *testing.T
	clock  *fakeClock
	policy engine.SyncPolicy
	dir    string
	q      *queue.Queue
	msgs   []queueMsg // index = offset
	ops    []string   // the operations so far, for a failure report

	// counters since the last open
	sent, received, redelivered, deleted uint64
}

func (m *queueModel) note(format string, args ...any) {
	m.ops = append(m.ops, fmt.Sprintf(format, args...))
}

func (m *queueModel) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s\noperations (policy %v):\n  %s", fmt.Sprintf(format, args...), m.policy, strings.Join(m.ops, "\n  "))
}

func (m *queueModel) open() {
	q, err := queue.Open(m.dir, queue.Options{
		Log:                engine.Options{SegmentBytes: 1024, Sync: m.policy, SyncInterval: time.Millisecond},
		Visibility:         queueVisibility,
		CheckpointInterval: 3 * time.Second,
		Clock:              m.clock,
	})
	if err != nil {
		m.fail("OpenQueue: %v", err)
	}
	m.q = q
	if rec := q.Recovery(); rec.CheckpointError != nil || len(rec.DeleteDamage) > 0 || rec.Lost > 0 {
		m.fail("recovery: %+v", rec)
	}
	m.sent, m.received, m.redelivered, m.deleted = 0, 0, 0, 0
	for i := range m.msgs {
		m.msgs[i].handed, m.msgs[i].ready, m.msgs[i].receives = false, false, 0
	}
}

func (m *queueModel) send(n int) {
	body := fmt.Sprintf("m%d-", len(m.msgs)) + strings.Repeat("x", n)
	off, err := m.q.Send([]byte(body))
	m.note("send -> %d, %v", off, err)
	if err != nil || off != uint64(len(m.msgs)) {
		m.fail("Send = %d, %v; want offset %d", off, err, len(m.msgs))
	}
	m.msgs = append(m.msgs, queueMsg{body: body})
	m.sent++
}

// expire marks the in-flight messages whose deadline passed ready again.
func (m *queueModel) expire() {
	now := m.clock.Now().UnixNano()
	for i := range m.msgs {
		if x := &m.msgs[i]; x.handed && !x.ready && !x.deleted && x.deadline <= now {
			x.ready = true
		}
	}
}

// next returns the offset the model hands out next, or -1: the lowest
// ready-again message, else the lowest never handed out since the open.
func (m *queueModel) next() int {
	m.expire()
	for i, x := range m.msgs {
		if x.ready && !x.deleted {
			return i
		}
	}
	for i, x := range m.msgs {
		if !x.handed && !x.deleted {
			return i
		}
	}
	return -1
}

func (m *queueModel) receive() {
	want := m.next()
	got, ok, err := m.q.TryReceive()
	m.note("receive -> %d (receives %d), %v %v", got.Offset, got.Receives, ok, err)
	if err != nil && !ok {
		m.fail("TryReceive: %v", err)
	}
	if !ok {
		err = context.Canceled // nothing was ready
	}
	if want < 0 {
		if err == nil {
			x := queueMsg{}
			if got.Offset < uint64(len(m.msgs)) {
				x = m.msgs[got.Offset]
			}
			m.fail("Receive handed out %d (model: deleted %v, in flight %v), nothing is ready", got.Offset, x.deleted, x.handed && !x.ready)
		}
		return
	}
	if err != nil {
		m.fail("Receive: %v; message %d is ready", err, want)
	}
	if got.Offset < uint64(len(m.msgs)) {
		switch x := m.msgs[got.Offset]; {
		case x.deleted:
			m.fail("Receive handed out %d, which was deleted", got.Offset)
		case x.handed && !x.ready:
			m.fail("Receive handed out %d again before its deadline", got.Offset)
		}
	}
	x := &m.msgs[want]
	if x.ready {
		m.redelivered++
	}
	x.handed, x.ready = true, false
	x.receives++
	deadline := m.clock.Now().Add(queueVisibility)
	x.deadline = deadline.UnixNano()
	m.received++
	if got.Offset != uint64(want) || got.Receives != x.receives || string(got.Body) != x.body || !got.Deadline.Equal(deadline) {
		m.fail("Receive = offset %d receives %d body %q deadline %v; want %d %d %q %v",
			got.Offset, got.Receives, got.Body, got.Deadline, want, x.receives, x.body, deadline)
	}
}

// delete deletes a message handed out (k chooses which) or, for k >= 192,
// an arbitrary offset.
func (m *queueModel) delete(k byte) {
	m.expire()
	var handed []int
	for i, x := range m.msgs {
		if x.handed && !x.deleted {
			handed = append(handed, i)
		}
	}
	off := uint64(k) % uint64(len(m.msgs)+3)
	if k < 192 && len(handed) > 0 {
		off = uint64(handed[int(k)%len(handed)])
	}
	err := m.q.Delete(off)
	m.note("delete %d -> %v", off, err)
	var want error
	switch {
	case off >= uint64(len(m.msgs)):
		want = queue.ErrNotInFlight
	case m.msgs[off].deleted:
	case m.msgs[off].handed:
		m.msgs[off].deleted = true
		m.deleted++
	default:
		want = queue.ErrNotInFlight
	}
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		m.fail("Delete(%d) = %v, want %v", off, err, want)
	}
}

func (m *queueModel) discard(k byte) {
	off := uint64(k) % uint64(len(m.msgs)+2)
	err := m.q.Discard(off)
	m.note("discard %d -> %v", off, err)
	if off >= uint64(len(m.msgs)) {
		if !errors.Is(err, engine.ErrNotFound) {
			m.fail("Discard(%d) at or beyond the end = %v, want ErrNotFound", off, err)
		}
		return
	}
	if err != nil {
		m.fail("Discard(%d) = %v", off, err)
	}
	if !m.msgs[off].deleted {
		m.msgs[off].deleted = true
		m.deleted++
	}
}

// reopen closes and reopens the queue; with crash, the directory is first
// copied while the queue is open (what a kill -9 leaves: the page cache),
// and the copy is opened.
func (m *queueModel) reopen(crash bool) {
	m.note("reopen (crash %v)", crash)
	dir := m.dir
	if crash {
		dir = m.dir + "-crash"
		testkit.MustCopyDir(m.t, m.dir, dir, true)
	}
	if err := m.q.Close(); err != nil {
		m.fail("Close: %v", err)
	}
	m.q = nil
	if crash {
		if err := os.RemoveAll(m.dir); err != nil {
			m.t.Fatal(err)
		}
		if err := os.Rename(dir, m.dir); err != nil {
			m.t.Fatal(err)
		}
	}
	m.open()
}

func (m *queueModel) checkStats() {
	m.expire()
	var inFlight, ready int
	head := len(m.msgs)
	for i, x := range m.msgs {
		switch {
		case x.deleted:
			continue
		case x.ready:
			ready++
		case x.handed:
			inFlight++
		}
		head = min(head, i)
	}
	st := m.q.Stats()
	if st.End != uint64(len(m.msgs)) || st.Head != uint64(head) || st.InFlight != inFlight || st.ReadyAgain != ready ||
		st.Cursor < st.Head || st.Cursor > st.End || st.CheckpointError != nil ||
		st.Sent != m.sent || st.Received != m.received || st.Redelivered != m.redelivered || st.Deleted != m.deleted {
		m.fail("Stats %+v; model: end %d head %d in flight %d ready again %d sent %d received %d redelivered %d deleted %d",
			st, len(m.msgs), head, inFlight, ready, m.sent, m.received, m.redelivered, m.deleted)
	}
}

// fakeClock is the engine's ManualClock, started at a fixed date.
type fakeClock = queue.ManualClock

func newFakeClock() *fakeClock {
	return queue.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

func queueOpsSeeds(testing.TB) []seed {
	s := func(name string, ops ...byte) seed { return seed{name, []any{ops}} }
	return []seed{
		s("send-receive-delete", 0, qSend, 5, qReceive, qDelete, 0, qStats),
		s("redeliver-after-deadline", 0, qSend, 1, qSend, 2, qReceive, qAdvance, 17, qReceive, qReceive, qDelete, 1),
		s("no-second-hand-out-before-deadline", 0, qSend, 1, qReceive, qReceive, qAdvance, 8, qReceive, qAdvance, 9, qReceive),
		s("deleted-never-again-after-reopen", 0, qSend, 1, qSend, 1, qSend, 1, qReceive, qReceive, qDelete, 0, qReopen, qReceive, qReceive, qReceive),
		s("crash-after-deletes", 0, qSend, 1, qSend, 1, qReceive, qDelete, 0, qAdvance, 64, qCrash, qReceive, qReceive),
		s("discard-ahead-of-cursor", 0, qSend, 1, qSend, 1, qSend, 1, qDiscard, 1, qReceive, qReceive, qReceive, qDiscard, 9),
		s("late-delete", 0, qSend, 1, qReceive, qAdvance, 32, qDelete, 0, qReceive),
		s("delete-not-handed", 0, qSend, 1, qDelete, 200, qDelete, 255),
		s("many-sends-roll-segments", 0, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31,
			qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31, qSend, 31,
			qReceive, qReceive, qReceive, qReceive, qReceive, qReceive, qReceive, qReceive, qReceive, qReceive,
			qDelete, 0, qDelete, 1, qDelete, 2, qDelete, 3, qDelete, 4, qDelete, 5, qDelete, 6, qDelete, 7, qDelete, 8, qDelete, 9,
			qAdvance, 80, qReopen, qReceive, qReceive),
		s("sync-interval", 1, qSend, 1, qReceive, qDelete, 0, qReopen, qSend, 2, qReceive),
		s("sync-always", 2, qSend, 1, qSend, 2, qReceive, qDelete, 0, qCrash, qReceive, qReceive),
	}
}
