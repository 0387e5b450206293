package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/pagelog/pagelog/engine"
)

// Queue returns the queue name, opening it if this store has not, and
// creating it (empty) if the store has no queue of that name. Every call
// for one name returns the same *Queue until it is closed. The name is
// 1-255 bytes of UTF-8 without '/' or NUL (ErrBadQueueName otherwise).
func (s *Store) Queue(name string) (*Queue, error) {
	return s.QueueWith(name, QueueOptions{})
}

// QueueWith is Queue with settings of the queue's own, used if this call
// opens it.
func (s *Store) QueueWith(name string, o QueueOptions) (*Queue, error) {
	if err := CheckQueueName(name); err != nil {
		return nil, err
	}
	return s.queue(name, o, nil)
}

func (s *Store) queue(name string, o QueueOptions, owner *Queue) (*Queue, error) {
	sq, err := s.lookup(name, true)
	if err != nil {
		return nil, err
	}
	return s.queueFound(sq, o, owner)
}

// queueFound returns the Queue of sq, opening it if needed; a queue
// deleted since it was looked up gets an error wrapping engine.ErrClosed.
func (s *Store) queueFound(sq *storeQueue, o QueueOptions, owner *Queue) (*Queue, error) {
	name := sq.name
	sq.openMu.Lock()
	defer sq.openMu.Unlock()
	s.mu.Lock()
	q, gone, closed := sq.q, s.byID[sq.id] != sq, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("pagelog: store %s: %w", s.dir, engine.ErrClosed)
	case gone:
		return nil, fmt.Errorf("pagelog: queue %q was deleted while it opened: %w", name, engine.ErrClosed)
	case q != nil && !q.closed.Load():
		return q, nil
	}
	q, err := s.openQueue(sq, o, owner)
	if err != nil {
		return nil, fmt.Errorf("pagelog: queue %q of store %s: %w", name, s.dir, err)
	}
	s.mu.Lock()
	if s.closed {
		// Close ran while this opened, and closes only the queues it
		// found: this one is closed here, its receivers woken.
		s.mu.Unlock()
		_ = q.close()
		return nil, fmt.Errorf("pagelog: store %s: %w", s.dir, engine.ErrClosed)
	}
	sq.q = q
	s.mu.Unlock()
	return q, nil
}

// lookup returns the queue named name, registering it when create is set
// and the store has none.
func (s *Store) lookup(name string, create bool) (*storeQueue, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("pagelog: store %s: %w", s.dir, engine.ErrClosed)
	}
	if sq := s.byName[name]; sq != nil || !create {
		s.mu.Unlock()
		if sq == nil {
			return nil, fmt.Errorf("%w: %q in store %s", ErrNoQueue, name, s.dir)
		}
		return sq, nil
	}
	if s.nextID == ^uint32(0) {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the store's queue ids are used up", engine.ErrFull)
	}
	id := s.nextID
	at, err := s.names.Append(encodeName(nameCreate, id, name))
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("pagelog: create queue %q: %w", name, err)
	}
	s.nextID++
	sq := s.addQueue(name, id)
	sq.openMu.Lock() // held until the creation is durable
	s.mu.Unlock()
	defer sq.openMu.Unlock()
	if s.opts.Log.Sync == engine.SyncAlways {
		if err := s.names.WaitDurable(context.Background(), at); err != nil {
			return nil, fmt.Errorf("pagelog: create queue %q: %w", name, err)
		}
	}
	return sq, nil
}

// openQueue builds the Queue of sq: its state from its head, its delete
// and receive-count records, and its dead-letter queue.
func (s *Store) openQueue(sq *storeQueue, o QueueOptions, owner *Queue) (*Queue, error) {
	opts := s.qopts
	if o.Visibility != 0 {
		opts.Visibility = o.Visibility
	}
	if o.DefaultDelay != 0 {
		opts.DefaultDelay = o.DefaultDelay
	}
	if o.DedupWindow != 0 {
		opts.DedupWindow = o.DedupWindow
	}
	if o.MaxReceives != 0 {
		opts.MaxReceives = o.MaxReceives
	}
	if owner != nil {
		opts.MaxReceives, opts.DefaultDelay = 0, 0
	}
	if opts, err := opts.withDefaults(""); err != nil {
		return nil, err
	} else if opts.Visibility > MaxVisibility {
		return nil, err
	}
	for _, v := range []*storeView{sq.msgs, sq.dels, sq.recvs} {
		v.reopen()
	}
	q := newQueue(s.dir, opts, owner)
	q.st = &storeRef{s: s, sq: sq}
	q.log, q.dels = sq.msgs, sq.dels
	if opts.MaxReceives > 0 || sq.recvs.Next() > 0 {
		q.recvs = sq.recvs
	}
	if err := q.start(); err != nil {
		return nil, err
	}
	return q, nil
}

// openDeadLetters opens the dead-letter queue of q, a queue of the store:
// the queue NAME.dead, when MaxReceives > 0 or the store has it.
func (s *Store) openDeadLetters(q *Queue) error {
	name := q.st.sq.name + deadSuffix
	if q.opts.MaxReceives == 0 {
		if _, err := s.lookup(name, false); err != nil {
			return nil
		}
	}
	d, err := s.queue(name, QueueOptions{}, q)
	if err != nil {
		return err
	}
	q.dead = d
	return nil
}

// DeleteQueue deletes the queue name and its dead-letter queue: their
// messages are gone from Receive and every reader at once (their records
// are removed with the shared segments, as the other queues' heads
// move), their receivers blocked in Receive get ErrClosed, and a queue
// created later under the name starts empty.
func (s *Store) DeleteQueue(name string) error {
	if err := CheckQueueName(name); err != nil && CheckQueueName(trimDead(name)) != nil {
		return err
	}
	sq, err := s.lookup(name, false)
	if err != nil {
		return err
	}
	var errs []error
	sq.openMu.Lock()
	if q := sq.q; q != nil && !q.closed.Load() {
		if q.owner != nil && !q.owner.closed.Load() {
			sq.openMu.Unlock()
			return fmt.Errorf("pagelog: queue %q is the dead-letter queue of an open queue: delete that one", name)
		}
		errs = append(errs, q.close())
	}
	s.mu.Lock()
	if s.byID[sq.id] != sq {
		s.mu.Unlock()
		sq.openMu.Unlock()
		return fmt.Errorf("%w: %q in store %s", ErrNoQueue, name, s.dir)
	}
	at, err := s.names.Append(encodeName(nameDelete, sq.id, ""))
	if err == nil {
		delete(s.byID, sq.id)
		delete(s.byName, sq.name)
		if sq.hasHead {
			s.headBytes -= 4 + headSize
		}
		for _, v := range []*storeView{sq.msgs, sq.dels, sq.recvs} {
			v.forget()
		}
	}
	s.mu.Unlock()
	sq.openMu.Unlock()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("pagelog: delete queue %q: %w", name, err))...)
	}
	if s.opts.Log.Sync != engine.SyncNone {
		errs = append(errs, s.names.WaitDurable(context.Background(), at))
	}
	if dead := name + deadSuffix; trimDead(name) == name {
		if _, err := s.lookup(dead, false); err == nil {
			errs = append(errs, s.DeleteQueue(dead))
		}
	}
	return errors.Join(errs...)
}

// Names returns the names of the store's queues, sorted.
func (s *Store) Names() []string {
	s.mu.Lock()
	out := make([]string, 0, len(s.byName))
	for name := range s.byName {
		out = append(out, name)
	}
	s.mu.Unlock()
	slices.Sort(out)
	return out
}
