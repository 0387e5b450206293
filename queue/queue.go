package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/engine"

	"github.com/pagelog/pagelog/inflight"
)

// A Queue is a durable work queue on a Log: Send appends a message, Receive
// hands one out and hides it until its deadline (now + Visibility), Delete
// acknowledges it. A message whose deadline passes before it is deleted is
// handed out again (at-least-once delivery).
//
// # Files
//
// The messages are an ordinary Log in the queue's directory D (`pagelog read
// --dir D` reads them). Beside it: queue.head, the head checkpoint, and
// D/deletes/, the delete log (one record per Delete). FORMAT.md describes
// both. Segments of either log that lie wholly below a checkpointed head are
// removed.
//
// # Positions
//
// End is the next send's offset, Cursor the oldest message never handed out
// (in this process), Head the oldest message not deleted.
//
// # Body lifetime
//
// Message.Body is a slice of the mapped segment: no copy is made. It stays
// valid until this receiver deletes the message, its deadline passes, or the
// queue is closed, whichever comes first. Using it after that is a mistake
// that may read stale bytes or zeros, but never crashes the process or
// changes the log (the queue's segments keep their addresses mapped, as
// zero pages, when released). The mapping is read-only: writing into Body
// faults.
//
// # Concurrency
//
// Every method is safe for concurrent use. Sends are serialized in the log;
// Receive, Delete and Stats take a short lock on the in-flight table. No
// message is handed to two receivers while its deadline has not passed.
//
// # Restart
//
// Deadlines live in memory only. After a reopen every message not deleted
// is ready at once, lowest offset first, with Receives starting again at 1;
// no deleted message is handed out again (see the README for the promises
// under each sync policy).
type Queue struct {
	dir     string
	opts    Options
	clock   Clock
	vis     time.Duration
	log     *engine.Log
	dels    *engine.Log
	syncEnd bool // SyncAlways: hand out only durable messages

	closed atomic.Bool
	inside atomic.Int32 // receivers in Receive: a Send must look for waiters
	sent   atomic.Uint64

	mu       sync.Mutex
	t        *inflight.Table
	skip     *skipSet // deleted offsets at or above the cursor
	waiters  waitList
	timer    Timer
	timerAt  int64  // deadline the timer is set for (Unix ns)
	timerGen uint64 // bumps when the timer is replaced, to ignore stale calls
	buckets  deleteBuckets
	counts   queueCounts

	ck       checkpointState
	recovery Recovery
	epoch    time.Time // the Clock's time at Open: the queue's time 0 (see now)
	pins     pins      // records of handed-out bodies, kept until their deadlines
}

// Options configure a Queue. Zero fields mean the defaults.
type Options struct {
	// Log configures the message log. Its Sync policy applies to the
	// delete log too. ReadOnly is refused.
	Log engine.Options
	// Visibility is how long a received message stays hidden; default 30 s.
	Visibility time.Duration
	// CheckpointInterval is how often the head is written to queue.head
	// when it moved; default 1 s. Close writes it too.
	CheckpointInterval time.Duration
	// Clock is the source of time for deadlines and timers; nil means the
	// system clock. Tests inject a fake one to make time pass at will.
	Clock Clock
}

// Queue defaults and limits.
const (
	DefaultVisibility         = 30 * time.Second
	DefaultCheckpointInterval = time.Second
	// MaxVisibility bounds how long a message may stay hidden: deadlines
	// are nanoseconds on the queue's own clock, and a year keeps every
	// one far from overflow.
	MaxVisibility = 365 * 24 * time.Hour
)

// ErrNotInFlight is returned by Delete for an offset that was not handed
// out since the queue was opened, or that lies beyond the end.
var ErrNotInFlight = errors.New("pagelog: message not in flight")

// Message is one message handed out by Receive.
type Message struct {
	Offset   uint64
	Body     []byte    // zero-copy; see the Queue's body lifetime rule
	Receives int       // 1 on the first hand-out, +1 at each hand-out after a deadline passed
	Deadline time.Time // hidden from other receivers until then
}

// Stats is a snapshot of a queue's positions and counters.
type Stats struct {
	End        uint64 // offset of the next send
	Cursor     uint64 // oldest message never handed out since open
	Head       uint64 // oldest message not deleted
	InFlight   int    // handed out, deadline not passed
	ReadyAgain int    // deadline passed, waiting to be handed out again

	// Counters since open.
	Sent        uint64 // messages sent
	Received    uint64 // hand-outs, redeliveries included
	Redelivered uint64 // hand-outs after a deadline passed (Receives > 1)
	Deleted     uint64 // messages deleted (not counting repeated deletes)

	Checkpointed    uint64 // head written in queue.head
	CheckpointError error  // the last checkpoint's failure, nil when it worked
}

// queueCounts are the counters of Stats kept under Queue.mu.
type queueCounts struct {
	received, redelivered, deleted uint64
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Log.ReadOnly:
		return o, fmt.Errorf("%w: a queue cannot be opened read-only", engine.ErrBadOptions)
	case o.Visibility < 0 || o.Visibility > MaxVisibility:
		return o, fmt.Errorf("%w: Visibility %v outside [0, %v] (0: %v)", engine.ErrBadOptions, o.Visibility, MaxVisibility, DefaultVisibility)
	case o.CheckpointInterval < 0:
		return o, fmt.Errorf("%w: CheckpointInterval %v is negative (0: %v)", engine.ErrBadOptions, o.CheckpointInterval, DefaultCheckpointInterval)
	}
	if o.Visibility == 0 {
		o.Visibility = DefaultVisibility
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	return o, o.Log.Validate()
}

// Open opens (creating it if needed) the queue in dir. It rebuilds the
// queue's state from the head checkpoint and the delete log; Recovery tells
// what it found.
func Open(dir string, opts Options) (*Queue, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	lo := opts.Log
	dirMode := lo.DirMode
	if dirMode == 0 {
		dirMode = 0o700
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("pagelog: create %s: %w", dir, err)
	}
	if st, err := os.Stat(filepath.Join(dir, deletesDir)); err == nil && !st.IsDir() {
		return nil, fmt.Errorf("pagelog: open %s: %s is not a directory (the queue's delete log)", dir, filepath.Join(dir, deletesDir))
	}
	lo.RetireMappings = true
	l, err := engine.Open(dir, lo)
	if err != nil {
		return nil, err
	}
	dels, err := engine.Open(filepath.Join(dir, deletesDir), deleteLogOptions(opts.Log))
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	q := &Queue{
		dir: dir, opts: opts, clock: opts.Clock, vis: opts.Visibility,
		log: l, dels: dels, syncEnd: opts.Log.Sync == engine.SyncAlways,
		epoch: opts.Clock.Now(),
	}
	if err := q.restore(); err != nil {
		_ = dels.Close()
		_ = l.Close()
		return nil, err
	}
	q.scheduleCheckpoint()
	return q, nil
}

// Dir returns the queue's directory.
func (q *Queue) Dir() string { return q.dir }

// Recovery returns the report of what Open found and did.
func (q *Queue) Recovery() Recovery { return q.recovery }

// Send appends body as a new message and returns its offset. Under
// SyncAlways it returns once the message is synced. The queue keeps no
// reference to body.
func (q *Queue) Send(body []byte) (uint64, error) {
	if q.closed.Load() {
		return 0, engine.ErrClosed
	}
	off, err := q.log.Append(body)
	if err != nil {
		return 0, err
	}
	q.sent.Add(1)
	if q.inside.Load() > 0 {
		q.mu.Lock()
		q.waiters.wake(1)
		q.mu.Unlock()
	}
	return off, nil
}

// Receive hands out a message and hides it until its deadline: first the
// ready-again message with the lowest offset, else the one at the cursor.
// When none is ready it blocks until one is (a Send, an expiring deadline),
// the queue is closed (ErrClosed) or ctx is done (ctx.Err()). A context
// that is already done returns ctx.Err() at once and hands out nothing.
//
// A message whose record fails its checks is handed out like any other,
// with an error wrapping ErrCorrupt and the Message's Offset, Receives and
// Deadline set: delete it to skip it, or it comes back after its deadline.
func (q *Queue) Receive(ctx context.Context) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err // a done context changes nothing
	}
	q.inside.Add(1)
	defer q.inside.Add(-1)
	for {
		m, w, err := q.tryReceive()
		if err != nil || w == nil {
			return m, err
		}
		select {
		case <-w:
		case <-ctx.Done():
			q.cancelWait(w)
			return Message{}, ctx.Err()
		}
	}
}

// TryReceive is Receive without waiting: ok is false, and nothing changes,
// when no message is ready now.
func (q *Queue) TryReceive() (m Message, ok bool, err error) {
	return q.tryReceiveNow()
}

// tryReceiveNow hands out a message if one is ready; handed is false when
// none is.
func (q *Queue) tryReceiveNow() (Message, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return Message{}, false, engine.ErrClosed
	}
	m, ok, err := q.handOut()
	return m, ok, err
}

// handOut hands out the next ready message, if any, with its body. Called
// with q.mu held. A message whose record fails its checks is handed out
// too, with the error (see Receive).
func (q *Queue) handOut() (Message, bool, error) {
	now := q.now()
	q.expire(now)
	deadline := addSat(now, int64(q.vis))
	off, recv, ok, err := q.take(deadline)
	if err != nil || !ok {
		return Message{}, false, err
	}
	q.armTimer(now)
	m := Message{Offset: off, Receives: recv, Deadline: q.wallTime(deadline)}
	// The body is read, and its record kept until this hand-out's
	// deadline (see pins), under the lock: nothing can delete the message
	// and drop its segment in between.
	r, err := q.log.Read(off)
	if err != nil {
		return m, true, err
	}
	m.Body = r.Body
	q.pins.push(deadline, r)
	return m, true, nil
}

// addSat adds without overflow.
func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// tryReceive hands out a message, or registers the caller as a waiter and
// returns the channel that wakes it.
func (q *Queue) tryReceive() (Message, chan struct{}, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return Message{}, nil, engine.ErrClosed
	}
	m, ok, err := q.handOut()
	if !ok && err == nil {
		return Message{}, q.waiters.add(), nil
	}
	return m, nil, err
}

// take hands out the next message with the given deadline: the lowest
// ready-again one, else the one at the cursor (skipping deleted offsets).
func (q *Queue) take(deadline int64) (uint64, int, bool, error) {
	if off, recv, ok := q.t.PopReady(deadline); ok {
		q.counts.received++
		q.counts.redelivered++
		return off, recv, true, nil
	}
	if err := q.skipAhead(); err != nil {
		return 0, 0, false, err
	}
	c := q.t.Cursor()
	if c >= q.end() {
		return 0, 0, false, nil
	}
	if err := q.t.Add(c, deadline); err != nil {
		return 0, 0, false, fmt.Errorf("pagelog: queue hand-out of %d: %w", c, err)
	}
	q.counts.received++
	return c, 1, true, nil
}

// skipAhead moves the cursor past the deleted offsets at it (deleted before
// a restart, lost, or discarded ahead of the cursor), so that the head
// follows.
func (q *Queue) skipAhead() error {
	end := q.end()
	for {
		c := q.t.Cursor()
		q.skip.trimFront(c)
		r, ok := q.skip.front()
		if !ok || r.from != c || c >= end {
			return nil
		}
		to := min(r.to, end)
		if err := q.t.Skip(to); err != nil {
			return fmt.Errorf("pagelog: queue skip of [%d, %d): %w", c, to, err)
		}
		q.skip.trimFront(to)
	}
}

// end is the offset below which messages may be handed out: every appended
// one, or under SyncAlways every synced one.
func (q *Queue) end() uint64 {
	if q.syncEnd {
		return q.log.Durable()
	}
	return q.log.Next()
}

// Delete marks the message at offset done: it leaves the in-flight table (a
// late delete of a message whose deadline passed counts too) and a delete
// record is appended to the delete log; under SyncAlways Delete returns
// once that record is synced. Deleting an offset already deleted returns
// nil. An offset not handed out since the queue was opened, or beyond the
// end, gets ErrNotInFlight.
func (q *Queue) Delete(offset uint64) error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	st, err := q.t.Done(offset)
	if err != nil {
		known, head, cursor := q.skipped(offset), q.t.Head(), q.t.Cursor()
		q.mu.Unlock()
		if known {
			return nil
		}
		return fmt.Errorf("%w: offset %d (head %d, cursor %d)", ErrNotInFlight, offset, head, cursor)
	}
	if st == inflight.StateDone {
		q.mu.Unlock()
		return nil
	}
	q.counts.deleted++
	at, err := q.appendDelete(offset)
	if serr := q.skipAhead(); err == nil {
		err = serr
	}
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return q.waitDelete(at)
}

// Discard deletes the message at offset whatever its state in this
// process: in flight, ready again, or not handed out yet. It is meant for
// tools (`pagelog queue delete`), which run in a process that did not
// receive the message: the in-flight table lives in the receiving process
// only. Discarding an offset already deleted returns nil; one at or beyond
// the end gets an error wrapping ErrNotFound.
func (q *Queue) Discard(offset uint64) error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	if next := q.log.Next(); offset >= next {
		q.mu.Unlock()
		return fmt.Errorf("%w: offset %d is at or beyond the end %d", engine.ErrNotFound, offset, next)
	}
	if offset >= q.t.Cursor() {
		if q.skipped(offset) {
			q.mu.Unlock()
			return nil
		}
		q.skip.add(offset, offset+1)
		q.counts.deleted++
		at, err := q.appendDelete(offset)
		if err == nil {
			err = q.skipAhead()
		}
		q.mu.Unlock()
		if err != nil {
			return err
		}
		return q.waitDelete(at)
	}
	q.mu.Unlock()
	return q.Delete(offset)
}

// waitDelete waits, under SyncAlways, until the delete record at is synced.
func (q *Queue) waitDelete(at uint64) error {
	if q.opts.Log.Sync != engine.SyncAlways {
		return nil
	}
	return q.dels.WaitDurable(context.Background(), at)
}

// Stats returns the queue's positions and counters. It expires the
// deadlines that have passed first.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed.Load() {
		q.expire(q.now())
	}
	head, ckErr := q.ck.snapshot()
	return Stats{
		End: q.log.Next(), Cursor: q.t.Cursor(), Head: q.t.Head(),
		InFlight: q.t.InFlight(), ReadyAgain: q.t.ReadyAgain(),
		Sent: q.sent.Load(), Received: q.counts.received,
		Redelivered: q.counts.redelivered, Deleted: q.counts.deleted,
		Checkpointed: head, CheckpointError: ckErr,
	}
}

// Close wakes every blocked receiver (they return ErrClosed), writes the
// head checkpoint and closes both logs. Bodies handed out become invalid.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	q.closed.Store(true)
	q.stopTimer()
	q.waiters.wakeAll()
	q.pins.releaseAll() // bodies are invalid from now on
	q.mu.Unlock()

	errs := []error{q.stopCheckpoints()}
	if q.opts.Log.Sync == engine.SyncAlways {
		errs = append(errs, q.dels.Sync())
	}
	errs = append(errs, q.dels.Close(), q.log.Close())
	return errors.Join(errs...)
}
