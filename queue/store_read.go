package queue

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/pagelog/pagelog/engine"
)

// ErrNotStore is returned by StatStore (and by tools) for a directory that
// holds no store.
var ErrNotStore = errors.New("pagelog: not a store")

// StoreStatus is what the files of a store say, read without opening it
// (see StatStore).
type StoreStatus struct {
	// StoreStats are the totals; Deepest lists every queue, deepest first,
	// and Open and InFlight are 0 (a look from outside sees no hand-out).
	StoreStats
	Recovery StoreRecovery // what reading the logs found
}

// StatStore reads the store in dir without opening it: no lock is taken
// and nothing is written, so it works beside the process that has the
// store open. A queue's depth is counted from its checkpointed head, as
// StoreStats counts a queue not open (deleted messages above the head
// included); StatStoreQueue counts one queue exactly.
func StatStore(dir string) (StoreStatus, error) {
	s, err := lookStore(dir)
	if err != nil {
		return StoreStatus{}, err
	}
	defer s.closeLogs()
	st := StoreStatus{StoreStats: s.Stats(), Recovery: s.recovery}
	st.Deepest = s.Depths()
	return st, nil
}

// StatStoreQueue reads the queue name of the store in dir without opening
// the store, as Stat reads a queue directory: its positions, its messages
// not deleted (from its head and its delete records) and what its records
// say of its recovery. DeadLetters counts those of the queue NAME.dead.
func StatStoreQueue(dir, name string) (Status, error) {
	s, err := lookStore(dir)
	if err != nil {
		return Status{}, err
	}
	defer s.closeLogs()
	st, _, err := s.statusOf(name)
	return st, err
}

// StoreMessages calls fn for each message not deleted of the queue name of
// the store in dir, oldest first, until fn returns false. Like Messages,
// it reads the files without opening the store: no lock, nothing written.
// Beside a process that removes segments of the store's logs while it
// reads, a message in a removed segment is left out.
func StoreMessages(dir, name string, fn func(Stored) bool) error {
	r, err := ReadStore(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Messages(name, fn)
}

// A StoreReader reads the queues of a store from its files as
// StoreMessages does, reading the store's logs once for every queue it
// is asked for (StoreMessages reads them at each call): a snapshot of
// every queue of a store reads it once.
type StoreReader struct{ s *Store }

// ReadStore opens the store in dir to read, as StoreMessages does: no
// lock, nothing written. What the files hold when it returns is what the
// reader sees, but for segments removed meanwhile (see StoreMessages).
func ReadStore(dir string) (*StoreReader, error) {
	s, err := lookStore(dir)
	if err != nil {
		return nil, err
	}
	return &StoreReader{s: s}, nil
}

// Names returns the names of the store's queues, sorted.
func (r *StoreReader) Names() []string { return r.s.Names() }

// Messages calls fn for each message not deleted of the queue name,
// oldest first, until fn returns false (see StoreMessages). A name the
// store does not hold is an error wrapping ErrNoQueue.
func (r *StoreReader) Messages(name string, fn func(Stored) bool) error {
	st, skip, err := r.s.statusOf(name)
	if err != nil {
		return err
	}
	r.s.mu.Lock()
	sq := r.s.byName[name]
	r.s.mu.Unlock()
	walkMessages(sq.msgs, st.Head, skip, fn)
	return nil
}

// Close closes the reader's logs.
func (r *StoreReader) Close() error {
	r.s.closeLogs()
	return nil
}

// lookStore loads the store in dir from read-only opens of its logs: a
// Store that only reads (no checkpoint loop, no queue is to be opened).
func lookStore(dir string) (*Store, error) {
	if ok, err := IsStore(dir); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%w: %s (no %s/ log)", ErrNotStore, dir, storeNamesDir)
	}
	if err := checkStoreDir(dir); err != nil {
		return nil, err
	}
	s := &Store{dir: dir, byName: map[string]*storeQueue{}, byID: map[uint32]*storeQueue{}, nextID: 1}
	open := func(sub string) (*engine.Log, error) {
		return engine.OpenReadOnly(filepath.Join(dir, sub), engine.Options{})
	}
	var err error
	// names/ first, heads/ next: a queue and a head that the logs read
	// later name were written before them.
	if s.names, err = open(storeNamesDir); err == nil {
		s.heads, err = open(storeHeadsDir)
	}
	for _, sh := range []struct {
		sub string
		to  **sharedLog
	}{{storeMessagesDir, &s.msgs}, {storeDeletesDir, &s.dels}, {storeReceivesDir, &s.recvs}} {
		if err != nil {
			break
		}
		var l *engine.Log
		if l, err = open(sh.sub); err == nil {
			*sh.to = &sharedLog{l: l}
		}
	}
	if err == nil {
		err = s.load()
	}
	if err != nil {
		s.closeLogs()
		return nil, fmt.Errorf("pagelog: read store %s: %w", dir, err)
	}
	return s, nil
}

// statusOf returns what the records of the queue name say (as Stat), and
// the offsets at or above its head that are deleted or lost.
func (s *Store) statusOf(name string) (Status, *skipSet, error) {
	s.mu.Lock()
	sq := s.byName[name]
	s.mu.Unlock()
	if sq == nil {
		return Status{}, nil, fmt.Errorf("%w: %q in store %s", ErrNoQueue, name, s.dir)
	}
	st := Status{First: sq.msgs.First(), End: sq.msgs.Next(), Log: s.msgs.l.Recovery(),
		Deletes: s.dels.l.Recovery(), Receives: s.recvs.l.Recovery()}
	if h, ok := s.headOf(sq); ok {
		st.HeadFrom, st.Checkpointed, st.CheckpointEnd, st.Head = "checkpoint", h.head, h.end, h.head
	} else {
		st.HeadFrom, st.Head = "log start (no checkpoint)", st.First
	}
	skip, n, loss := replay(sq.dels, st.Head, nil)
	st.DeleteRecords, st.DeleteDamage, st.DeletesLost = n, loss.reports, loss.records
	_, n, loss = replayReceives(sq.recvs, st.Head, nil)
	st.ReceiveRecords, st.ReceiveDamage, st.ReceivesLost = n, loss.reports, loss.records
	countMessages(&st, skip, sq.msgs)
	if trimDead(name) == name {
		if d, _, err := s.statusOf(name + deadSuffix); err == nil {
			st.DeadLetters = d.Messages
		}
	}
	return st, skip, nil
}

// Depths returns the depth of every queue of the store, deepest first (by
// name among equals); StoreStats.Deepest holds the first
// StoreStatsDeepest of them.
func (s *Store) Depths() []QueueDepth {
	type queueOf struct {
		sq *storeQueue
		q  *Queue
	}
	s.mu.Lock()
	qs := make([]queueOf, 0, len(s.byID))
	for _, sq := range s.byID {
		qs = append(qs, queueOf{sq, sq.q})
	}
	s.mu.Unlock()
	out := make([]QueueDepth, 0, len(qs))
	for _, x := range qs {
		sq := x.sq
		d := QueueDepth{Name: sq.name}
		if q := x.q; q != nil && !q.closed.Load() {
			d.Messages, d.InFlight = q.depth()
		} else {
			head, _ := s.headOf(sq)
			d.Messages = sq.msgs.Next() - min(sq.msgs.Next(), max(head.head, sq.msgs.First()))
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Messages != out[j].Messages {
			return out[i].Messages > out[j].Messages
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Has reports whether the store holds a queue named name (without
// creating it, as Queue does).
func (s *Store) Has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[name] != nil
}
