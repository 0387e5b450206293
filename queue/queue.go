package queue

import (
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
// # Features
//
// A message may be delayed (SendOptions.Delay, Due, Options.DefaultDelay):
// it is never handed out before its due time, and within 10 ms of it when
// a receiver waits (a timer is set for the earliest due time). It may
// belong to an ordering group (SendOptions.Group): the messages of one
// group are handed out one at a time, in send order, the next only once
// the previous one is deleted or moved to the dead letters, across
// redeliveries and restarts; delayed messages and groups hold back no
// other message. A send may carry a deduplication id
// (SendOptions.DedupID): within Options.DedupWindow a second send of the
// id appends nothing and returns the first offset. With
// Options.MaxReceives, a message received that many times without being
// deleted is moved to the dead-letter queue (DeadLetter) when it would be
// ready again; Redrive moves dead letters back. ChangeVisibility and
// Release move a message's deadline; ChangeVisibilityReceipt and
// ReleaseReceipt do so only for the delivery their Receipt names.
//
// # Files
//
// The messages are an ordinary Log in the queue's directory D (`pagelog read
// --dir D` reads them); due times, groups, dedup ids and dead-letter
// origins are attributes of their records. Beside it: queue.head, the head
// checkpoint; D/deletes/, the delete log (one record per Delete); and, with
// MaxReceives, D/receives/, the receive-count log (one record per hand-out).
// FORMAT.md describes them. Segments of these logs that lie wholly below a
// checkpointed head are removed (the message log keeps the records of the
// dedup window too). The dead-letter queue is a Queue of its own, by
// default in the sibling directory D.dead.
//
// A message that never finishes holds at most Options.MaxHeldSegments
// segments of the log: past that, the few live messages of the oldest
// segment are copied to the end of the log, keeping the offsets they are
// known by, and the segment is removed (see the package documentation,
// Held segments).
//
// # Positions
//
// End is the next send's offset, Cursor the oldest message the queue has
// not looked at yet (in this process), Head the oldest message not
// deleted.
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
// Receive, Delete and Stats take a short lock on the queue's state. No
// message is handed to two receivers while its deadline has not passed.
//
// # Restart
//
// Deadlines live in memory only. After a reopen every message not deleted
// is ready at once (delayed ones at their due time, grouped ones in their
// group's order), lowest offset first; no deleted message is handed out
// again (docs/durability.md and docs/queue.md give the promises under each sync policy). Receive
// counts survive a restart when the receive-count log exists (MaxReceives
// > 0); otherwise Receives starts again at 1.
type Queue struct {
	// The fields each Send, Receive and Delete reads come first, on as
	// few cache lines as they fit: a store spreading its work over
	// thousands of queues finds most of them out of the cache (the
	// struct is about 2 KiB, most of it read at open, by checkpoints and
	// by Stats). Measured in BenchmarkStoreSpreadReceiveDelete.
	mu     sync.Mutex
	closed atomic.Bool
	inside atomic.Int32 // receivers in Receive: a Send must look for waiters
	sent   atomic.Uint64
	// Under mu.
	t    *inflight.Table // which offsets in [head, cursor) are done
	es   *entries        // the messages in [head, cursor) not done
	skip *skipSet        // deleted offsets at or above the cursor

	log     messageLog
	dels    recordLog
	recvs   recordLog // the receive-count log; nil when there is none
	clock   Clock
	epoch   time.Time // the Clock's time at Open: the queue's time 0 (see now)
	vis     time.Duration
	nonce   uint64    // tells this open's deliveries from other opens' (see Receipt)
	syncEnd bool      // SyncAlways: hand out only durable messages
	st      *storeRef // the store, for a queue of a Store; nil for one that owns its directory
	dedup   *dedupWindow

	// Under mu.
	timerAt  int64  // time the timer is set for (queue time)
	timerGen uint64 // bumps when the timer is replaced, to ignore stale calls
	timer    Timer
	waiters  waitList
	pins     pins // records of handed-out bodies, kept until their deadlines
	buckets  deleteBuckets
	counts   queueCounts

	opts  Options
	dir   string
	dead  *Queue // the dead-letter queue; nil when there is none
	owner *Queue // the source, when this is a dead-letter queue

	// Under mu.
	restored    restoredCounts // receive counts read at open, above the cursor
	dying       []uint64       // messages to move to the dead letters
	retryAt     int64          // after a failed move: when to try again
	moves       sync.WaitGroup // moves and redrives running
	recvBuckets deleteBuckets

	mv       moveState // moves out of held segments (moved.go)
	dm       deadMoves // moves to the dead letters under way (deadletter.go)
	ck       checkpointState
	recovery Recovery
}

// ErrNotInFlight is returned by Delete for an offset that was not handed
// out since the queue was opened, or that lies beyond the end, and by
// ChangeVisibility and Release for a message not in flight.
var ErrNotInFlight = errors.New("pagelog: message not in flight")

// ErrNoDeadLetters is returned by Redrive of a queue that has no
// dead-letter queue.
var ErrNoDeadLetters = errors.New("pagelog: the queue has no dead-letter queue")

// Message is one message handed out by Receive.
type Message struct {
	Offset   uint64
	Body     []byte    // zero-copy; see the Queue's body lifetime rule
	Receives int       // 1 on the first hand-out, +1 at each hand-out after that
	Deadline time.Time // hidden from other receivers until then
	Group    string    // the message's ordering group, "" when none
	// Receipt names this hand-out: ReleaseReceipt and
	// ChangeVisibilityReceipt act on the message only while it is the
	// message's current delivery.
	Receipt Receipt
}

// Stats is a snapshot of a queue's positions and counters.
type Stats struct {
	End        uint64 // offset of the next send
	Cursor     uint64 // oldest message the queue has not looked at since open
	Head       uint64 // oldest message not deleted
	Messages   uint64 // messages not deleted
	InFlight   int    // handed out, deadline not passed
	ReadyAgain int    // handed out before, deadline passed, waiting to be handed out again

	// What the features add. The queue knows of a message once its
	// cursor has passed it: a receiver looking for a ready message passes
	// the delayed and waiting ones in its way.
	Delayed       int           // waiting for their due time
	Waiting       int           // grouped, waiting for an earlier message of their group
	Groups        int           // ordering groups with messages the queue knows of
	GroupsWaiting int           // of them, those with a message waiting behind an earlier one
	Dying         int           // waiting to be moved to the dead letters
	DeadLetters   uint64        // messages in the dead-letter queue not deleted
	DedupIDs      int           // deduplication ids remembered
	Moved         uint64        // messages moved out of a held segment since open (Options.MaxHeldSegments)
	OldestAge     time.Duration // age of the head message, from the time index (0: none, or not known)
	// OldestAgeKnown tells the two zeros of OldestAge apart: false when
	// messages wait but the time index cannot tell their age yet (a log
	// with less than one index interval, 4 KiB by default, per segment).
	OldestAgeKnown bool

	// Counters since open.
	Sent         uint64 // messages sent
	Received     uint64 // hand-outs, redeliveries included
	Redelivered  uint64 // hand-outs with Receives > 1
	Deleted      uint64 // messages deleted (not counting repeated deletes)
	DeadLettered uint64 // messages moved to the dead letters
	Redriven     uint64 // dead letters moved back into this queue

	Checkpointed    uint64 // head written in queue.head
	CheckpointError error  // the last checkpoint's failure, nil when it worked
	MoveError       error  // the last dead-letter move's failure, nil when it worked

	// Log is the message log's own figures: its segments and bytes on
	// disk, mappings, syncs and their latency, the sticky sync error.
	Log engine.LogStats
}

// queueCounts are the counters of Stats kept under Queue.mu.
type queueCounts struct {
	received, redelivered, deleted, deadLettered, redriven uint64
	moveErr                                                error
}

// Open opens (creating it if needed) the queue in dir. It rebuilds the
// queue's state from the head checkpoint, the delete log and the
// receive-count log, and the dedup window from the end of the message log;
// Recovery tells what it found. It opens the dead-letter queue too (see
// Options.DeadLetterDir); a dead-letter directory that another queue has
// open gives ErrLocked. A store's directory gives ErrNotQueue (its queues
// open with OpenStore).
func Open(dir string, opts Options) (*Queue, error) {
	return open(dir, opts, nil)
}

func open(dir string, opts Options, owner *Queue) (*Queue, error) {
	if err := engine.Supported(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults(dir)
	if err != nil {
		return nil, err
	}
	lo := opts.Log
	dirMode := lo.DirMode
	if dirMode == 0 {
		dirMode = 0o700
	}
	if ok, err := IsStore(dir); err != nil {
		return nil, fmt.Errorf("pagelog: open %s: %w", dir, err)
	} else if ok {
		// A store's deletes/ and receives/ are shared by its queues.
		return nil, fmt.Errorf("%w: %s holds a store (open it with OpenStore)", ErrNotQueue, dir)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("pagelog: create %s: %w", dir, err)
	}
	for _, sub := range []string{deletesDir, receivesDir} {
		// Lstat: a symbolic link in place of a side log would have the
		// queue write its files wherever it points.
		if st, err := os.Lstat(filepath.Join(dir, sub)); err == nil && !st.IsDir() {
			return nil, fmt.Errorf("pagelog: open %s: %s is not a directory (the queue's %s log)", dir, filepath.Join(dir, sub), sub)
		}
	}
	q := newQueue(dir, opts, owner)
	if err := q.openLogs(); err != nil {
		q.closeLogs()
		return nil, err
	}
	if err := q.start(); err != nil {
		return nil, err
	}
	return q, nil
}

func newQueue(dir string, opts Options, owner *Queue) *Queue {
	return &Queue{
		dir: dir, opts: opts, clock: opts.Clock, vis: opts.Visibility,
		syncEnd: opts.Log.Sync == engine.SyncAlways, owner: owner,
		dedup: newDedupWindow(opts.DedupWindow),
		epoch: opts.Clock.Now(), nonce: openNonce(),
	}
}

// start rebuilds the state of a queue whose logs are open, opens its
// dead-letter queue and starts its checkpoints. On failure it closes the
// logs.
func (q *Queue) start() error {
	if err := q.restore(); err != nil {
		q.closeLogs()
		return err
	}
	if err := q.rebuildDedup(); err != nil {
		q.closeLogs()
		return err
	}
	if q.owner == nil {
		var err error
		if q.st != nil {
			err = q.st.s.openDeadLetters(q)
		} else {
			err = q.openDeadLetters()
		}
		if err != nil {
			q.closeLogs()
			return err
		}
	}
	q.mu.Lock()
	err := q.restoreMoved()
	q.mu.Unlock()
	if err != nil {
		if q.dead != nil {
			_ = q.dead.close()
		}
		q.closeLogs()
		return err
	}
	q.scheduleCheckpoint()
	return nil
}

// openLogs opens the message log, the delete log and, when MaxReceives >
// 0 or it exists, the receive-count log.
func (q *Queue) openLogs() error {
	lo := q.opts.Log
	lo.RetireMappings = true
	if lo.RecycleSegments == 0 {
		// The queue owns its directory: the files of the segments its
		// head leaves behind are reused (see engine.Options).
		lo.RecycleSegments = recycledSegments
	}
	l, err := engine.Open(q.dir, lo)
	if err != nil {
		return err
	}
	q.log = dirLog{l, q.dir}
	if l, err = engine.Open(filepath.Join(q.dir, deletesDir), deleteLogOptions(q.opts.Log, q.log.SegmentBytes())); err != nil {
		return err
	}
	q.dels = l
	rdir := filepath.Join(q.dir, receivesDir)
	if _, serr := os.Stat(rdir); q.opts.MaxReceives > 0 || serr == nil {
		if l, err = engine.Open(rdir, receiveLogOptions(q.opts.Log, q.log.SegmentBytes())); err != nil {
			return err
		}
		q.recvs = l
	}
	return nil
}

// closeLogs closes the logs that are open (after a failed Open).
func (q *Queue) closeLogs() {
	for _, l := range []recordLog{q.recvs, q.dels, q.log} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// Dir returns the queue's directory (its store's, for a queue of a Store).
func (q *Queue) Dir() string { return q.dir }

// Name returns the queue's name in its Store ("" for a queue that owns
// its directory).
func (q *Queue) Name() string {
	if q.st == nil {
		return ""
	}
	return q.st.sq.name
}

// Recovery returns the report of what Open found and did.
func (q *Queue) Recovery() Recovery { return q.recovery }

// Send appends body as a new message (delayed by Options.DefaultDelay) and
// returns its offset. Under SyncAlways it returns once the message is
// synced. The queue keeps no reference to body.
func (q *Queue) Send(body []byte) (uint64, error) {
	if q.opts.DefaultDelay == 0 {
		return q.appendOne(body, nil)
	}
	return q.SendWith(body, SendOptions{})
}

// SendWith is Send with delivery options: a delay or due time, an ordering
// group, a deduplication id. A DedupID sent within the DedupWindow appends
// nothing and returns the offset of its first send (even if that message
// was deleted since). Options out of their bounds give an error wrapping
// ErrInvalidAttrs and send nothing.
func (q *Queue) SendWith(body []byte, o SendOptions) (uint64, error) {
	now := q.clock.Now()
	a, err := o.attrs(now, q.opts.DefaultDelay)
	if err != nil {
		return 0, err
	}
	if o.DedupID != "" {
		return q.sendDedup(body, &a, o.DedupID, int64(now.Sub(q.epoch)))
	}
	return q.appendOne(body, &a)
}

// SendBatch appends bodies as consecutive messages (delayed by
// Options.DefaultDelay) with one append and, under SyncAlways, one sync,
// and returns the first one's offset. A body over the size limit sends
// nothing. An error after some were written (a full disk, a failed sync)
// says how many were sent: those offsets from first on are messages.
func (q *Queue) SendBatch(bodies [][]byte) (first uint64, err error) {
	var attrs []*engine.Attrs
	if q.opts.DefaultDelay > 0 {
		a, err := SendOptions{}.attrs(q.clock.Now(), q.opts.DefaultDelay)
		if err != nil {
			return 0, err
		}
		attrs = make([]*engine.Attrs, len(bodies))
		for i := range attrs {
			attrs[i] = &a
		}
	}
	first, n, err := q.appendBatch(bodies, attrs)
	if err != nil && n > 0 {
		return first, fmt.Errorf("pagelog: send batch: %d of %d messages sent, offsets [%d, %d): %w", n, len(bodies), first, first+uint64(n), err)
	}
	return first, err
}

// appendOne appends one message and wakes a waiting receiver.
func (q *Queue) appendOne(body []byte, a *engine.Attrs) (uint64, error) {
	if q.closed.Load() {
		return 0, engine.ErrClosed
	}
	off, err := appendTo(q.log, body, a)
	if err != nil {
		return 0, err
	}
	q.sent.Add(1)
	q.wakeForSends(1)
	q.noteSends(1)
	return off, nil
}

// appendBatch appends messages with one append and wakes as many waiting
// receivers.
func (q *Queue) appendBatch(bodies [][]byte, attrs []*engine.Attrs) (uint64, int, error) {
	if q.closed.Load() {
		return 0, 0, engine.ErrClosed
	}
	first, n, err := q.log.AppendBatch(bodies, attrs)
	if n > 0 {
		q.sent.Add(uint64(n))
		q.wakeForSends(n)
		q.noteSends(n)
	}
	return first, n, err
}

// wakeForSends wakes up to n receivers blocked in Receive, if any.
func (q *Queue) wakeForSends(n int) {
	if q.inside.Load() > 0 {
		q.mu.Lock()
		q.waiters.wake(n)
		q.mu.Unlock()
	}
}

// addSat adds without overflow.
func addSat(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// end is the offset below which messages may be handed out: every appended
// one, or under SyncAlways every synced one.
func (q *Queue) end() uint64 {
	if q.syncEnd {
		return q.log.Durable()
	}
	return q.log.Next()
}

// Stats returns the queue's positions and counters. It expires the
// deadlines and due times that have passed first.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	now := q.now()
	if !q.closed.Load() {
		q.expire(now)
	}
	head, ckErr := q.ck.snapshot()
	es := q.es
	groups, groupsWaiting := es.groupCounts()
	next := q.log.Next()
	st := Stats{
		End: next, Cursor: q.t.Cursor(), Head: q.t.Head(),
		InFlight: es.n[stInFlight], ReadyAgain: es.nAgain,
		Delayed: es.n[stDelayed], Waiting: es.n[stWaiting],
		Groups: groups, GroupsWaiting: groupsWaiting,
		Dying: es.n[stDying] + es.n[stMoving],
		Sent:  q.sent.Load(), Received: q.counts.received,
		Redelivered: q.counts.redelivered, Deleted: q.counts.deleted,
		DeadLettered: q.counts.deadLettered, Redriven: q.counts.redriven,
		Checkpointed: head, CheckpointError: ckErr, MoveError: q.counts.moveErr,
		Moved: q.mv.moved,
	}
	st.Messages = q.messagesLocked(next)
	q.mu.Unlock()
	st.DedupIDs = q.dedup.size(now)
	st.Log = q.log.Stats()
	st.OldestAgeKnown = st.Messages == 0
	if st.Messages > 0 {
		if t, ok := appendTime(q.log, st.Head); ok {
			st.OldestAge, st.OldestAgeKnown = max(time.Since(t), 0), true
		}
	}
	if q.dead != nil {
		st.DeadLetters = q.dead.Stats().Messages
	}
	return st
}

// messagesLocked counts the messages not deleted, next the log's end.
// Called with q.mu held.
func (q *Queue) messagesLocked(next uint64) uint64 {
	var n uint64
	if c := q.t.Cursor(); next > c {
		n = next - c - min(q.skip.count(), next-c)
		for stor := range q.es.moved {
			if stor >= c && n > 0 {
				n-- // counted with its entry
			}
		}
	}
	return n + uint64(len(q.es.byOff))
}

// depth returns the messages not deleted and those in flight (for the
// store's Stats).
func (q *Queue) depth() (uint64, int) {
	next := q.log.Next()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.messagesLocked(next), q.es.n[stInFlight]
}

// Close wakes every blocked receiver (they return ErrClosed), finishes the
// moves to the dead letters under way or due, writes the head checkpoint
// and closes the logs and the dead-letter queue. Bodies handed out become
// invalid. The dead-letter queue is closed by its source's Close only.
func (q *Queue) Close() error {
	if q.owner != nil && !q.owner.closed.Load() {
		return errors.New("pagelog: a dead-letter queue is closed by its source queue's Close")
	}
	return q.close()
}

func (q *Queue) close() error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	q.closed.Store(true)
	q.stopTimer()
	q.waiters.wakeAll()
	q.pins.releaseAll() // bodies are invalid from now on
	q.es.releasePins()
	q.mu.Unlock()

	q.moves.Wait() // no move starts once closed, but this one
	q.mu.Lock()
	last := q.takeDying(true)
	q.mu.Unlock()
	if last != nil {
		q.runMoves(last)
	}
	errs := []error{q.stopCheckpoints()}
	q.ck.bg.Wait() // an early checkpoint's goroutine sees stopped and ends
	if q.st != nil && !q.st.s.closing.Load() && q.owner == nil {
		// Closed alone: its head (and its dead letters') is synced now,
		// not at the store's next checkpoint.
		defer func() { _ = q.st.s.heads.Sync() }()
	}
	if q.opts.Log.Sync == engine.SyncAlways {
		errs = append(errs, q.dels.Sync())
		if q.recvs != nil {
			errs = append(errs, q.recvs.Sync())
		}
	}
	// The message log closes first: its Close removes the files it keeps
	// for reuse and its prepared next segment before it writes its
	// clean-close marker, and on a full disk the other logs' markers
	// need that space too.
	errs = append(errs, q.log.Close())
	if q.dead != nil {
		errs = append(errs, q.dead.close())
	}
	if q.recvs != nil {
		errs = append(errs, q.recvs.Close())
	}
	errs = append(errs, q.dels.Close())
	return errors.Join(errs...)
}
