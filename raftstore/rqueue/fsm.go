package rqueue

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
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

// Receive hands out the next ready message of the default queue
// (ReceiveFrom).
func (f *FSM) Receive(ctx context.Context) (Message, error) {
	return f.ReceiveFrom(ctx, DefaultQueue)
}

// ReceiveFrom hands out the next ready message of the local queue name, as
// queue.Receive does, with its replicated id. Only the leader's hand-outs
// mean anything (Node.Receive checks): the deadline lives on this node. A
// queue the FSM lacks is waited for as an empty one: a send creates it.
func (f *FSM) ReceiveFrom(ctx context.Context, name string) (Message, error) {
	for {
		f.mu.Lock()
		fq, changed, err := f.queues[name], f.changed, f.stopped()
		f.mu.Unlock()
		if err != nil {
			return Message{}, err
		}
		if fq == nil {
			f.mu.Lock()
			f.waiting++
			f.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-changed:
			}
			f.mu.Lock()
			f.waiting--
			f.mu.Unlock()
			if ctx.Err() != nil {
				return Message{}, ctx.Err()
			}
			continue
		}
		m, err := fq.q.Receive(ctx)
		if errors.Is(err, engine.ErrClosed) {
			f.mu.Lock()
			current := f.queues[name] == fq && f.stopped() == nil
			f.mu.Unlock()
			if current { // closed under the FSM
				return Message{}, fmt.Errorf("%w: %w", ErrFailed, err)
			}
			continue // replaced by Restore, dropped, or closed: the next look tells
		}
		if err != nil && m.Offset == 0 && m.Receives == 0 {
			return Message{}, err
		}
		f.mu.Lock()
		id, ok := fq.idOf[m.Offset]
		same := f.queues[name] == fq
		f.mu.Unlock()
		if !ok || !same {
			continue // deleted between the hand-out and now
		}
		return Message{ID: id, Body: m.Body, Receives: m.Receives, Deadline: m.Deadline, Group: m.Group}, err
	}
}

func (f *FSM) stopped() error {
	if f.closed || f.failed != nil {
		return f.brokenErr()
	}
	return nil
}

// ChangeVisibility moves the deadline of the message id of the default
// queue (ChangeVisibilityIn).
func (f *FSM) ChangeVisibility(id uint64, d time.Duration) error {
	return f.ChangeVisibilityIn(DefaultQueue, id, d)
}

// ChangeVisibilityIn moves the deadline of the message id of the queue
// name, in flight on this node, to d from now (0: ready at once); see
// queue.ChangeVisibility.
func (f *FSM) ChangeVisibilityIn(name string, id uint64, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stopped(); err != nil {
		return err
	}
	fq := f.queues[name]
	if fq == nil {
		return fmt.Errorf("%w: id %d: no queue %q", ErrNotFound, id, name)
	}
	off, ok := fq.offOf[id]
	if !ok {
		return fmt.Errorf("%w: id %d in queue %q", ErrNotFound, id, name)
	}
	return fq.q.ChangeVisibility(off, d)
}

// Status is what an FSM holds.
type Status struct {
	Applied  uint64      // the last raft index applied
	NextID   uint64      // the id of the next message sent
	Messages int         // live messages (not deleted), over every queue
	InFlight int         // handed out by this node and not deleted, over every queue
	Queues   int         // queues
	Failed   error       // the local store's failure, nil when it works
	Queue    queue.Stats // the default queue's (zero when it was dropped)
}

// Status returns the FSM's counters.
func (f *FSM) Status() Status {
	f.mu.Lock()
	st := Status{Applied: f.applied, NextID: f.next, Queues: len(f.queues), Failed: f.failed}
	for _, fq := range f.queues {
		st.Messages += len(fq.offOf)
	}
	var q *queue.Queue
	if fq := f.queues[DefaultQueue]; fq != nil {
		q = fq.q
	}
	s := f.store
	f.mu.Unlock()
	if q != nil {
		st.Queue = q.Stats()
	}
	st.InFlight = s.Stats().InFlight
	return st
}

// QueueStatus is one queue of an FSM.
type QueueStatus struct {
	Name     string `json:"name"`
	Messages int    `json:"messages"`  // live messages (not deleted)
	InFlight int    `json:"in_flight"` // handed out by this node, not deleted, deadline to come
}

// Queues returns the FSM's queues, by name.
func (f *FSM) Queues() []QueueStatus {
	f.mu.Lock()
	names := slices.Sorted(maps.Keys(f.queues))
	out := make([]QueueStatus, len(names))
	for i, name := range names {
		out[i] = QueueStatus{Name: name, Messages: len(f.queues[name].offOf)}
	}
	s := f.store
	f.mu.Unlock()
	inFlight := map[string]int{}
	for _, d := range s.Depths() {
		inFlight[d.Name] = d.InFlight
	}
	for i := range out {
		out[i].InFlight = inFlight[out[i].Name]
	}
	return out
}

// QueueStatus returns the queue name's status, or an error wrapping
// queue.ErrNoQueue when the FSM lacks it.
func (f *FSM) QueueStatus(name string) (QueueStatus, error) {
	f.mu.Lock()
	fq := f.queues[name]
	var st QueueStatus
	if fq != nil {
		st = QueueStatus{Name: name, Messages: len(fq.offOf)}
	}
	f.mu.Unlock()
	if fq == nil {
		return st, fmt.Errorf("rqueue: %w: %q", queue.ErrNoQueue, name)
	}
	st.InFlight = fq.q.Stats().InFlight
	return st, nil
}

// HTTPAddr returns the HTTP address node id announced ("" when none).
func (f *FSM) HTTPAddr(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.http[id]
}

// Digest is a summary of an FSM's messages, equal on nodes that applied
// the same commands.
type Digest struct {
	Applied  uint64 `json:"applied"`
	NextID   uint64 `json:"next_id"`
	Queues   int    `json:"queues"`
	Messages int    `json:"messages"`
	// SHA256 of every queue, by name: its name, then every live
	// message's id, due time, group and body, in id order.
	SHA256 string `json:"sha256"`
}

// Digest reads every live message from the local store's files and
// returns their digest. It checks that the files and the FSM's maps
// agree.
func (f *FSM) Digest() (Digest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stopped(); err != nil {
		return Digest{}, err
	}
	d := Digest{Applied: f.applied, NextID: f.next, Queues: len(f.queues)}
	h := sha256.New()
	// No segment is dropped while the files are read (a moved message's
	// original or copy must stay where the reader finds it).
	resume := f.store.PauseDrops()
	defer resume()
	r, err := queue.ReadStore(f.sdir)
	if err != nil {
		return d, err
	}
	defer r.Close()
	var buf []byte
	for _, name := range slices.Sorted(maps.Keys(f.queues)) {
		fq := f.queues[name]
		h.Write(appendBytes(buf[:0], []byte(name)))
		seen, bad := 0, false
		err := r.Messages(name, func(m queue.Stored) bool {
			id, ok := fq.idOf[m.Offset]
			if !ok && m.Err != nil {
				// A record no live message names, read as damaged: a
				// segment the store dropped before the pause and reuses.
				return true
			}
			if !ok || m.Err != nil {
				bad = true
				return false
			}
			buf = appendMessage(buf[:0], id, m)
			h.Write(buf)
			seen++
			return true
		})
		if err == nil && (bad || seen != len(fq.offOf)) {
			err = fmt.Errorf("rqueue: the local queue %q holds %d live messages, the FSM %d", name, seen, len(fq.offOf))
		}
		d.Messages += seen
		if err != nil {
			return d, err
		}
	}
	d.SHA256 = hex.EncodeToString(h.Sum(nil))
	return d, nil
}

// appendMessage appends a message as a snapshot holds it.
func appendMessage(b []byte, id uint64, m queue.Stored) []byte {
	var due uint64
	if !m.Due.IsZero() {
		due = uint64(m.Due.UnixMilli())
	}
	b = binary.AppendUvarint(b, id)
	b = binary.AppendUvarint(b, due)
	b = appendBytes(b, []byte(m.Group))
	return appendBytes(b, m.Body)
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
