package rqueue

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// FSM is a raft.FSM whose commands are the queue's operations, applied to
// a pagelog queue in a directory of its own. See the package
// documentation for what it keeps and why.
type FSM struct {
	dir  string
	opts queue.Options
	max  int // largest body

	mu      sync.Mutex
	q       *queue.Queue
	qdir    string
	gen     uint64
	offOf   map[uint64]uint64 // live message id -> local offset
	idOf    map[uint64]uint64 // local offset -> id
	next    uint64            // the next message id
	applied uint64            // the last raft index applied
	http    map[string]string // node id -> HTTP address (announce)
	failed  error
	closed  bool
	// reading counts the snapshots reading each queue directory; one
	// that Restore replaced is removed once none reads it (retired).
	reading map[string]int
	retired map[string]bool
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM makes an FSM whose queue lives under dir. Whatever dir holds is
// removed first: the queue is rebuilt from raft's snapshot and log, the
// durable copy. opts configure the local queue; its Sync is ignored (the
// queue runs SyncNone: raft's log is what survives a crash), MaxReceives
// and DeadLetterDir are refused (receive counts and dead-letter moves
// would live on one node only), DedupWindow is unused.
func NewFSM(dir string, opts queue.Options) (*FSM, error) {
	if opts.MaxReceives != 0 || opts.DeadLetterDir != "" {
		return nil, fmt.Errorf("%w: rqueue: MaxReceives and DeadLetterDir are not replicated", engine.ErrBadOptions)
	}
	opts.Log.Sync = engine.SyncNone
	opts.Log.FirstOffset = 0
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("rqueue: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("rqueue: %w", err)
	}
	f := &FSM{dir: dir, opts: opts, max: opts.Log.MaxRecordBytes, next: 1, http: map[string]string{},
		reading: map[string]int{}, retired: map[string]bool{}}
	if f.max == 0 {
		f.max = engine.DefaultMaxRecordBytes
	}
	q, qdir, err := f.openGen(0)
	if err != nil {
		return nil, err
	}
	f.q, f.qdir = q, qdir
	f.offOf, f.idOf = map[uint64]uint64{}, map[uint64]uint64{}
	return f, nil
}

func (f *FSM) openGen(gen uint64) (*queue.Queue, string, error) {
	qdir := filepath.Join(f.dir, "q"+strconv.FormatUint(gen, 10))
	q, err := queue.Open(qdir, f.opts)
	return q, qdir, err
}

// MaxBodyBytes is the largest message body the local queue accepts.
func (f *FSM) MaxBodyBytes() int { return f.max }

// Apply applies one command. Its response is a SendResult, a
// DeleteResult, or nil (an announce, a log entry that is no command).
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = l.Index
	switch l.Data[0] {
	case cmdSend:
		msgs, err := decodeSend(l.Data[1:])
		if err == nil {
			err = f.check(msgs)
		}
		if err != nil {
			return SendResult{Err: err}
		}
		if f.failed != nil || f.closed {
			return SendResult{Err: f.brokenErr()}
		}
		first := f.next
		if err := send(f.q, msgs, func(off uint64, _ int) {
			f.offOf[f.next] = off
			f.idOf[off] = f.next
			f.next++
		}); err != nil {
			f.failed = err
			return SendResult{Err: f.brokenErr()}
		}
		return SendResult{First: first, N: len(msgs)}
	case cmdDelete:
		ids, err := decodeDelete(l.Data[1:])
		if err != nil {
			return DeleteResult{Err: err}
		}
		if f.failed != nil || f.closed {
			return DeleteResult{Err: f.brokenErr()}
		}
		n := 0
		for _, id := range ids {
			off, ok := f.offOf[id]
			if !ok {
				continue // deleted before, or never sent
			}
			if err := f.q.Discard(off); err != nil {
				f.failed = err
				return DeleteResult{Deleted: n, Err: f.brokenErr()}
			}
			delete(f.offOf, id)
			delete(f.idOf, off)
			n++
		}
		return DeleteResult{Deleted: n}
	case cmdAnnounce:
		if id, addr, err := decodeAnnounce(l.Data[1:]); err == nil {
			f.http[id] = addr
		}
		return nil
	}
	return fmt.Errorf("%w: kind %d", errBadCommand, l.Data[0])
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

// Receive hands out the next ready message of the local queue, as
// queue.Receive does, with its replicated id. Only the leader's hand-outs
// mean anything (Node.Receive checks): the deadline lives on this node.
func (f *FSM) Receive(ctx context.Context) (Message, error) {
	for {
		f.mu.Lock()
		q, err := f.q, f.stopped()
		f.mu.Unlock()
		if err != nil {
			return Message{}, err
		}
		m, err := q.Receive(ctx)
		if errors.Is(err, engine.ErrClosed) {
			continue // replaced by Restore, or closed: stopped() tells
		}
		if err != nil && m.Offset == 0 && m.Receives == 0 {
			return Message{}, err
		}
		f.mu.Lock()
		id, ok := f.idOf[m.Offset]
		same := q == f.q
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

// ChangeVisibility moves the deadline of the message id, in flight on this
// node, to d from now (0: ready at once); see queue.ChangeVisibility.
func (f *FSM) ChangeVisibility(id uint64, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stopped(); err != nil {
		return err
	}
	off, ok := f.offOf[id]
	if !ok {
		return fmt.Errorf("%w: id %d", ErrNotFound, id)
	}
	return f.q.ChangeVisibility(off, d)
}

// Status is what an FSM holds.
type Status struct {
	Applied  uint64 // the last raft index applied
	NextID   uint64 // the id of the next message sent
	Messages int    // live messages (not deleted)
	Failed   error  // the local queue's failure, nil when it works
	Queue    queue.Stats
}

// Status returns the FSM's counters.
func (f *FSM) Status() Status {
	f.mu.Lock()
	st := Status{Applied: f.applied, NextID: f.next, Messages: len(f.offOf), Failed: f.failed}
	q := f.q
	f.mu.Unlock()
	st.Queue = q.Stats()
	return st
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
	Messages int    `json:"messages"`
	SHA256   string `json:"sha256"` // of every live message's id, due time, group and body, in id order
}

// Digest reads every live message from the local queue's files and
// returns their digest. It checks that the files and the FSM's map agree.
func (f *FSM) Digest() (Digest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stopped(); err != nil {
		return Digest{}, err
	}
	d := Digest{Applied: f.applied, NextID: f.next}
	h := sha256.New()
	var buf []byte
	seen := 0
	// No segment is dropped while Messages reads (a moved message's
	// original or copy must stay where Messages finds it).
	resume := f.q.PauseDrops()
	defer resume()
	err := queue.Messages(f.qdir, func(m queue.Stored) bool {
		id, ok := f.idOf[m.Offset]
		if !ok && m.Err != nil {
			// A record no live message names, read as damaged: a
			// segment the queue dropped before the pause and reuses.
			return true
		}
		if !ok || m.Err != nil {
			d.Messages = -1
			return false
		}
		buf = appendMessage(buf[:0], id, m)
		h.Write(buf)
		seen++
		return true
	})
	if err == nil && (d.Messages < 0 || seen != len(f.offOf)) {
		err = fmt.Errorf("rqueue: the local queue holds %d live messages, the FSM %d", seen, len(f.offOf))
	}
	d.Messages = seen
	d.SHA256 = hex.EncodeToString(h.Sum(nil))
	return d, err
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

// Close closes the local queue; calls after it return ErrClosed. A
// snapshot being written goes on reading the queue's files.
func (f *FSM) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	f.closed = true
	return f.q.Close()
}

// live returns the live messages' (offset, id) pairs, by offset. Called
// with f.mu held.
func (f *FSM) live() [][2]uint64 {
	pairs := make([][2]uint64, 0, len(f.idOf))
	for off, id := range f.idOf {
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
