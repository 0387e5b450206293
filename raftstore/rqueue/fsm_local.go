package rqueue

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

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
