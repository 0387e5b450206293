package rqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// Errors. Test for them with errors.Is.
var (
	// ErrClosed: the FSM (or the Node) was closed.
	ErrClosed = errors.New("rqueue: closed")
	// ErrFailed: the local queue failed to apply a command (a full disk);
	// the node stops serving until it is restarted, which rebuilds its
	// queue from raft's snapshot and log.
	ErrFailed = errors.New("rqueue: the local queue failed")
	// ErrNotFound: ChangeVisibility of an id that is not a live message.
	ErrNotFound = errors.New("rqueue: no such message")
)

// Message is one message handed out by Receive.
type Message struct {
	ID       uint64    // the message's id, the same on every node
	Body     []byte    // zero-copy from the local log: see queue.Message
	Receives int       // hand-outs by this node since it became leader
	Deadline time.Time // hidden from other receivers until then
	Group    string
}

// SendResult is the response of a send command: ids [First, First+N).
type SendResult struct {
	First uint64
	N     int
	Err   error
}

// DeleteResult is the response of a delete command: how many of its ids
// were live messages, now deleted (the others were deleted before, or
// never sent).
type DeleteResult struct {
	Deleted int
	Err     error
}

// DefaultQueue is the name of the queue that the routes and methods
// without a queue name (POST /send, Node.Send, FSM.Receive, ...) act on.
// Every FSM starts with it, empty; it may be dropped like any other (a
// send to it creates it again).
const DefaultQueue = "default"

// QueueResult is the response of a create queue or drop queue command:
// whether it changed anything (a queue created that was not there, one
// dropped that was).
type QueueResult struct {
	Changed bool
	Err     error
}

// FSM is a raft.FSM whose commands are the queues' operations, applied to
// a pagelog store (queue.Store) in a directory of its own. See the package
// documentation for what it keeps and why.
type FSM struct {
	dir  string
	opts queue.StoreOptions
	max  int // largest body

	mu      sync.Mutex
	store   *queue.Store
	sdir    string
	gen     uint64
	queues  map[string]*fsmQueue
	changed chan struct{}     // closed, and replaced, when a queue is created, the store replaced, or the FSM closed
	waiting int               // receivers waiting on changed
	next    uint64            // the next message id, over every queue
	applied uint64            // the last raft index applied
	http    map[string]string // node id -> HTTP address (announce)
	failed  error
	closed  bool
	// reading counts the snapshots reading each store directory; one
	// that Restore replaced is removed once none reads it (retired).
	reading map[string]int
	retired map[string]bool
}

// fsmQueue is one queue of the FSM: its queue in the store, and the map
// between its live messages' ids and their offsets in it.
type fsmQueue struct {
	q     *queue.Queue
	offOf map[uint64]uint64 // live message id -> local offset
	idOf  map[uint64]uint64 // local offset -> id
}

func newFSMQueue(q *queue.Queue) *fsmQueue {
	return &fsmQueue{q: q, offOf: map[uint64]uint64{}, idOf: map[uint64]uint64{}}
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM makes an FSM whose store lives under dir, holding the default
// queue, empty. Whatever dir holds is removed first: the store is rebuilt
// from raft's snapshot and log, the durable copy. opts configure the
// store and its queues (Log, Visibility, CheckpointInterval, Clock,
// DefaultDelay, MaxHeldSegments); its Sync is ignored (the store runs
// SyncNone: raft's log is what survives a crash), MaxReceives and
// DeadLetterDir are refused (receive counts and dead-letter moves would
// live on one node only), DedupWindow is unused.
func NewFSM(dir string, opts queue.Options) (*FSM, error) {
	if opts.MaxReceives != 0 || opts.DeadLetterDir != "" {
		return nil, fmt.Errorf("%w: rqueue: MaxReceives and DeadLetterDir are not replicated", engine.ErrBadOptions)
	}
	so := queue.StoreOptions{Log: opts.Log, Visibility: opts.Visibility, CheckpointInterval: opts.CheckpointInterval,
		Clock: opts.Clock, DefaultDelay: opts.DefaultDelay, MaxHeldSegments: opts.MaxHeldSegments}
	so.Log.Sync = engine.SyncNone
	so.Log.FirstOffset = 0
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("rqueue: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("rqueue: %w", err)
	}
	f := &FSM{dir: dir, opts: so, max: so.Log.MaxRecordBytes, next: 1, http: map[string]string{},
		changed: make(chan struct{}), reading: map[string]int{}, retired: map[string]bool{}}
	if f.max == 0 {
		f.max = engine.DefaultMaxRecordBytes
	}
	s, sdir, err := f.openGen(0)
	if err != nil {
		return nil, err
	}
	q, err := s.Queue(DefaultQueue)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	f.store, f.sdir = s, sdir
	f.queues = map[string]*fsmQueue{DefaultQueue: newFSMQueue(q)}
	return f, nil
}

func (f *FSM) openGen(gen uint64) (*queue.Store, string, error) {
	sdir := filepath.Join(f.dir, "s"+strconv.FormatUint(gen, 10))
	s, err := queue.OpenStore(sdir, f.opts)
	return s, sdir, err
}

// MaxBodyBytes is the largest message body the local queue accepts.
func (f *FSM) MaxBodyBytes() int { return f.max }

// CheckQueueName returns nil for a name the FSM takes for a queue, an
// error wrapping queue.ErrBadQueueName otherwise: a store's queue name
// (queue.CheckQueueName) that does not end in ".dead" (the store's name
// of a queue's dead letters, which dropping the queue would drop too).
func CheckQueueName(name string) error {
	if err := queue.CheckQueueName(name); err != nil {
		return fmt.Errorf("rqueue: %w", err)
	}
	if strings.HasSuffix(name, ".dead") {
		return fmt.Errorf("rqueue: %w: %q ends in .dead (the name of a queue's dead letters)", queue.ErrBadQueueName, name)
	}
	return nil
}

// Apply applies one command. Its response is a SendResult, a
// DeleteResult, a QueueResult, or nil (an announce, a log entry that is
// no command).
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = l.Index
	data := l.Data[1:]
	name, err := DefaultQueue, error(nil)
	switch l.Data[0] {
	case cmdSendTo, cmdDeleteFrom, cmdCreateQueue, cmdDropQueue:
		name, data, err = decodeName(data)
		if err == nil {
			err = CheckQueueName(name)
		}
	}
	switch l.Data[0] {
	case cmdSend, cmdSendTo:
		var msgs []Outgoing
		if err == nil {
			msgs, err = decodeSend(data)
		}
		return f.applySend(name, msgs, err)
	case cmdDelete, cmdDeleteFrom:
		var ids []uint64
		if err == nil {
			ids, err = decodeDelete(data)
		}
		return f.applyDelete(name, ids, err)
	case cmdCreateQueue, cmdDropQueue:
		if err == nil && len(data) != 0 {
			err = fmt.Errorf("%w: %d bytes after the command", errBadCommand, len(data))
		}
		return f.applyQueueOp(l.Data[0], name, err)
	case cmdAnnounce:
		if id, addr, err := decodeAnnounce(data); err == nil {
			f.http[id] = addr
		}
		return nil
	}
	return fmt.Errorf("%w: kind %d", errBadCommand, l.Data[0])
}

// applySend sends msgs to the queue name, created when the FSM lacks it.
// Called with f.mu held.
func (f *FSM) applySend(name string, msgs []Outgoing, err error) SendResult {
	if err == nil {
		err = f.check(msgs)
	}
	if err != nil {
		return SendResult{Err: err}
	}
	if f.failed != nil || f.closed {
		return SendResult{Err: f.brokenErr()}
	}
	fq, err := f.queueFor(name, true)
	if err != nil {
		f.failed = err
		return SendResult{Err: f.brokenErr()}
	}
	first := f.next
	if err := send(fq.q, msgs, func(off uint64, _ int) {
		fq.offOf[f.next] = off
		fq.idOf[off] = f.next
		f.next++
	}); err != nil {
		f.failed = err
		return SendResult{Err: f.brokenErr()}
	}
	return SendResult{First: first, N: len(msgs)}
}

// applyDelete deletes the messages ids of the queue name. Called with
// f.mu held.
func (f *FSM) applyDelete(name string, ids []uint64, err error) DeleteResult {
	if err != nil {
		return DeleteResult{Err: err}
	}
	if f.failed != nil || f.closed {
		return DeleteResult{Err: f.brokenErr()}
	}
	fq := f.queues[name]
	if fq == nil {
		return DeleteResult{} // no such queue: none of the ids is live
	}
	n := 0
	for _, id := range ids {
		off, ok := fq.offOf[id]
		if !ok {
			continue // deleted before, never sent, or another queue's
		}
		if err := fq.q.Discard(off); err != nil {
			f.failed = err
			return DeleteResult{Deleted: n, Err: f.brokenErr()}
		}
		delete(fq.offOf, id)
		delete(fq.idOf, off)
		n++
	}
	return DeleteResult{Deleted: n}
}

// applyQueueOp creates (cmdCreateQueue) or drops (cmdDropQueue) the
// queue name. Called with f.mu held.
func (f *FSM) applyQueueOp(kind byte, name string, err error) QueueResult {
	if err != nil {
		return QueueResult{Err: err}
	}
	if f.failed != nil || f.closed {
		return QueueResult{Err: f.brokenErr()}
	}
	fq := f.queues[name]
	if kind == cmdCreateQueue {
		if fq != nil {
			return QueueResult{}
		}
		if _, err := f.queueFor(name, true); err != nil {
			f.failed = err
			return QueueResult{Err: f.brokenErr()}
		}
		return QueueResult{Changed: true}
	}
	if fq == nil {
		return QueueResult{}
	}
	// Its receivers blocked in Receive get ErrClosed, and find it gone.
	delete(f.queues, name)
	if err := f.store.DeleteQueue(name); err != nil {
		f.failed = err
		return QueueResult{Err: f.brokenErr()}
	}
	return QueueResult{Changed: true}
}

// queueFor returns the queue name, creating it in the store when create
// is set and the FSM lacks it (nil when it lacks it otherwise). Called
// with f.mu held.
func (f *FSM) queueFor(name string, create bool) (*fsmQueue, error) {
	if fq := f.queues[name]; fq != nil || !create {
		return fq, nil
	}
	q, err := f.store.Queue(name)
	if err != nil {
		return nil, err
	}
	fq := newFSMQueue(q)
	f.queues[name] = fq
	f.changedNow()
	return fq, nil
}

// changedNow wakes the receivers waiting for a queue to be created.
// Called with f.mu held.
func (f *FSM) changedNow() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *FSM) brokenErr() error {
	if f.closed {
		return ErrClosed
	}
	return fmt.Errorf("%w: %w", ErrFailed, f.failed)
}

// check refuses, before anything is sent, a batch the local queue would
// refuse for its content: every node refuses it alike.
func (f *FSM) check(msgs []Outgoing) error {
	for i, m := range msgs {
		switch {
		case len(m.Group) > queue.MaxIDBytes:
			return fmt.Errorf("%w: message %d: group of %d bytes, at most %d", engine.ErrInvalidAttrs, i, len(m.Group), queue.MaxIDBytes)
		case len(m.Body) > f.max:
			return fmt.Errorf("%w: message %d: body of %d bytes, at most %d", engine.ErrTooLarge, i, len(m.Body), f.max)
		}
	}
	return nil
}

// send sends msgs to q in order and calls record with each one's local
// offset and index in msgs. Runs of messages with neither due time nor
// group go in one SendBatch.
func send(q *queue.Queue, msgs []Outgoing, record func(off uint64, i int)) error {
	for i := 0; i < len(msgs); {
		j := i
		for j < len(msgs) && msgs[j].Due == 0 && msgs[j].Group == "" {
			j++
		}
		if j-i > 1 {
			bodies := make([][]byte, j-i)
			for k := range bodies {
				bodies[k] = msgs[i+k].Body
			}
			first, err := q.SendBatch(bodies)
			if err != nil {
				return err
			}
			for k := range bodies {
				record(first+uint64(k), i+k)
			}
			i = j
			continue
		}
		m := msgs[i]
		o := queue.SendOptions{Group: m.Group}
		if m.Due > 0 {
			// The due time was fixed when the send was proposed; a clock
			// far behind the proposer's must not make it out of range.
			o.Due = time.UnixMilli(min(m.Due, time.Now().Add(queue.MaxDelay-time.Minute).UnixMilli()))
		}
		off, err := q.SendWith(m.Body, o)
		if err != nil {
			return err
		}
		record(off, i)
		i++
	}
	return nil
}

func (f *FSM) stopped() error {
	if f.closed || f.failed != nil {
		return f.brokenErr()
	}
	return nil
}

// Close closes the local store; calls after it return ErrClosed. A
// snapshot being written goes on reading the store's files.
func (f *FSM) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	f.closed = true
	f.changedNow() // wakes the receivers waiting for a queue: ErrClosed
	return f.store.Close()
}

// live returns the live messages' (offset, id) pairs of fq, by offset.
// Called with f.mu held.
func (fq *fsmQueue) live() [][2]uint64 {
	pairs := make([][2]uint64, 0, len(fq.idOf))
	for off, id := range fq.idOf {
		pairs = append(pairs, [2]uint64{off, id})
	}
	slices.SortFunc(pairs, func(a, b [2]uint64) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	return pairs
}
