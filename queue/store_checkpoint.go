package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// writeHead appends h, sq's head, to the heads log. The store's
// checkpoint syncs the log before it removes anything h lets go.
func (s *Store) writeHead(sq *storeQueue, h headState) error {
	b := headRecord(sq.id, h)
	// The record and sq.head change together, under s.mu: a compaction
	// of the heads log copies sq.head, and its copy must never land
	// after a newer record of the queue.
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.heads.Append(b); err != nil {
		return fmt.Errorf("pagelog: head of queue %q: %w", sq.name, err)
	}
	if !sq.hasHead {
		s.headBytes += int64(len(b))
	}
	sq.head, sq.hasHead = h, true
	return nil
}

// headOf returns sq's head as the store last wrote or read it.
func (s *Store) headOf(sq *storeQueue) (headState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sq.head, sq.hasHead
}

// PauseDrops keeps the store's checkpoints from removing segments of its
// shared logs until resume is called (once; later calls do nothing): a
// reader of the store's files beside it (StoreMessages, a snapshot of
// every queue) then finds every record that was there when it began.
// Everything else goes on; the segments below every head stay on disk
// until the first checkpoint after the last resume.
func (s *Store) PauseDrops() (resume func()) {
	s.paused.Add(1)
	// A checkpoint that looked before the count went up ends first.
	s.ckMu.Lock()
	s.ckMu.Unlock()
	return sync.OnceFunc(func() { s.paused.Add(-1) })
}

// Checkpoint writes the heads of the queues that changed and syncs them,
// and removes the shared segments no queue needs any more, now rather
// than at the next CheckpointInterval.
func (s *Store) Checkpoint() error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("pagelog: store %s: %w", s.dir, engine.ErrClosed)
	}
	err := s.checkpoint()
	s.noteCheckpoint(err)
	return err
}

// tick runs the store's checkpoint every CheckpointInterval: one timer
// for the whole store.
func (s *Store) tick() {
	s.tickMu.Lock()
	stopped := s.stopped
	s.tickMu.Unlock()
	if stopped {
		return
	}
	s.noteCheckpoint(s.checkpoint())
	s.tickMu.Lock()
	if !s.stopped {
		s.timer = s.qopts.Clock.AfterFunc(s.qopts.CheckpointInterval, s.tick)
	}
	s.tickMu.Unlock()
}

// checkpointSoon brings forward the checkpoint of sq, whose head left the
// oldest segment of the message log it reaches into (Queue.noteHead): the
// store checkpoints the queues that asked and removes the shared segments
// no queue needs any more now, or once an eighth of CheckpointInterval
// has passed since the last checkpoint, rather than at the next tick.
// As for a queue that owns its directory, the segments the head leaves
// are then dropped one at a time and their files reused, rather than
// made anew while the tick is pending. Only the queues that asked are
// checkpointed.
//
// A store of more than earlyQueues queues leaves it to the tick: there
// the segment is most often held by other queues still, and each early
// checkpoint would look at every queue for its drop point.
func (s *Store) checkpointSoon(sq *storeQueue) {
	s.mu.Lock()
	many := len(s.byID) > earlyQueues
	s.mu.Unlock()
	if many {
		return
	}
	s.tickMu.Lock()
	if s.stopped {
		s.tickMu.Unlock()
		return
	}
	s.early = append(s.early, sq)
	if s.earlyArmed {
		s.tickMu.Unlock()
		return
	}
	s.earlyArmed = true
	s.earlyRuns.Add(1)
	run := func() {
		defer s.earlyRuns.Done()
		s.earlyTick()
	}
	due := s.lastCk.Load() + int64(s.qopts.CheckpointInterval/8)
	if wait := due - s.qopts.Clock.Now().UnixNano(); wait > 0 {
		s.earlyTimer = s.qopts.Clock.AfterFunc(time.Duration(wait), run)
		s.tickMu.Unlock()
		return
	}
	s.tickMu.Unlock()
	// Not on the caller's goroutine: a queue's Close waits for that one,
	// and the checkpoint may open queues (their openMu held by the
	// closing caller).
	go run()
}

// earlyQueues is the most queues a store may hold for checkpointSoon to
// bring a checkpoint forward.
const earlyQueues = 1024

// earlyTick runs the checkpoint checkpointSoon brought forward.
func (s *Store) earlyTick() {
	s.tickMu.Lock()
	qs, stopped := s.early, s.stopped
	s.early, s.earlyArmed, s.earlyTimer = nil, false, nil
	s.tickMu.Unlock()
	if !stopped && len(qs) > 0 {
		s.noteCheckpoint(s.checkpointOf(qs))
	}
}

func (s *Store) noteCheckpoint(err error) {
	if err == nil {
		s.ckErr.Store(nil)
		return
	}
	s.ckErr.Store(&err)
}

// checkpoint writes the heads of the queues that changed, syncs the heads
// log, and removes the segments of the shared logs that no queue reaches
// into any more. A queue that holds the oldest segment of a shared log
// with more segments than MaxHeldSegments allows is opened, so that its
// checkpoint moves its few live messages out of it.
func (s *Store) checkpoint() error { return s.checkpointOf(nil) }

// checkpointOf is checkpoint, of the queues only when only is not nil (a
// checkpoint brought forward: see checkpointSoon).
func (s *Store) checkpointOf(only []*storeQueue) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	s.lastCk.Store(s.qopts.Clock.Now().UnixNano())
	errs := s.openHolders(s.holders())
	s.mu.Lock()
	var open []queueOf
	if only != nil {
		for _, sq := range only {
			// A queue deleted or closed since it asked is left alone.
			if sq.q != nil && s.byID[sq.id] == sq {
				open = append(open, queueOf{sq, sq.q})
			}
		}
	} else {
		for _, sq := range s.byID {
			if sq.q != nil && (sq.keep || sq.dirty.Load() || s.holds(sq)) {
				open = append(open, queueOf{sq, sq.q}) // sq.q is set under s.mu
			}
		}
	}
	s.mu.Unlock()
	for _, e := range open {
		sq, q := e.sq, e.q
		if q.closed.Load() {
			continue // its Close wrote its last head
		}
		sq.dirty.Store(false)
		if s.holdsLocking(sq) {
			q.readAhead()
		}
		q.ck.mu.Lock()
		if !q.ck.stopped {
			errs = append(errs, q.checkpoint())
		}
		keep := q.ck.dropPending || q.ck.held != 0
		q.ck.mu.Unlock()
		sq.keep = keep
	}
	// The drop points are taken before the heads log is synced: a view
	// trims its map only after its head record is appended, so every
	// trim they see is covered by the sync (a queue closed meanwhile
	// writes its head outside this checkpoint).
	lows, drop := s.dropPoints()
	errs = append(errs, s.heads.Sync())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if drop {
		errs = append(errs, s.dropShared(lows))
	}
	errs = append(errs, s.compactHeads())
	return errors.Join(errs...)
}

// holds reports whether sq holds the oldest segment of the message log
// while the log has more segments than a queue may hold. Called with s.mu
// held.
func (s *Store) holds(sq *storeQueue) bool {
	limit := s.qopts.MaxHeldSegments + 1
	if _, _, _, n := s.msgs.l.SegmentOf(0); n <= limit {
		return false
	}
	return sq.msgs.segments() > limit
}

func (s *Store) holdsLocking(sq *storeQueue) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds(sq)
}

// readAhead moves q's cursor to the end of its records in the oldest
// segment of the message log, making the messages it passes ready (or
// delayed, waiting, dying, as a receive would): a move takes only the
// messages the queue has looked at, and a queue of a store holds the
// shared log whether or not anyone receives from it.
func (q *Queue) readAhead() {
	_, b1, ok := q.log.oldestSegment()
	if !ok {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return
	}
	now := q.now()
	for c := q.t.Cursor(); c < b1 && c < q.end(); c = q.t.Cursor() {
		i, r, _, found, err := q.scan(now)
		if err != nil {
			break
		}
		if found {
			r.Release()
			q.es.set(i, stReady, 0)
			q.waiters.wake(1)
		} else if q.t.Cursor() == c {
			break // no way on
		}
	}
	q.armTimer(now)
}

// holders returns the queues not open in this process that hold the
// oldest segment of the message log or the delete log while that log has
// more segments than a queue may hold: opened, their checkpoints move
// their messages on or let the records go.
func (s *Store) holders() []*storeQueue {
	limit := s.qopts.MaxHeldSegments + 1
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*storeQueue
	_, _, _, nm := s.msgs.l.SegmentOf(0)
	_, _, _, nd := s.dels.l.SegmentOf(0)
	if nm <= limit && nd <= limit {
		return nil
	}
	for _, sq := range s.byID {
		if sq.q != nil && !sq.q.closed.Load() {
			continue // open: its checkpoint moves
		}
		if !(nm > limit && sq.msgs.segments() >= nm || nd > limit && sq.dels.segments() >= nd) {
			continue
		}
		if src := s.byName[trimDead(sq.name)]; src != nil && src != sq {
			sq = src // a dead-letter queue opens with its source
		}
		out = append(out, sq)
	}
	return out
}

// openHolders opens the queues holders found, so that their checkpoints
// move their messages on. A queue deleted since holders looked is left
// alone: opened by its name, it would be created again.
func (s *Store) openHolders(hs []*storeQueue) []error {
	var errs []error
	for _, sq := range hs {
		if _, err := s.queueFound(sq, QueueOptions{}, nil); err != nil && !errors.Is(err, engine.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errs
}

// dropShared removes the segments of the shared logs that lie wholly
// below every queue's first record in them.
func (s *Store) dropShared(lows [3]uint64) error {
	var errs []error
	for i, sh := range []*sharedLog{s.msgs, s.dels, s.recvs} {
		if _, err := sh.l.DropBefore(lows[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropPoints returns, for each shared log, the position below which no
// queue has a record it may still need; drop is false when nothing is to
// be removed (drops paused, or only active segments).
func (s *Store) dropPoints() (lows [3]uint64, drop bool) {
	if s.paused.Load() > 0 {
		return lows, false // the next checkpoint after the last resume drops
	}
	several := false
	for _, sh := range []*sharedLog{s.msgs, s.dels, s.recvs} {
		if _, _, _, n := sh.l.SegmentOf(0); n > 1 {
			several = true
		}
	}
	if !several {
		return lows, false
	}
	s.mu.Lock()
	lows = [3]uint64{s.msgs.l.Next(), s.dels.l.Next(), s.recvs.l.Next()}
	for _, sq := range s.byID {
		for i, v := range []*storeView{sq.msgs, sq.dels, sq.recvs} {
			if p, ok := v.low(); ok {
				lows[i] = min(lows[i], p)
			}
		}
	}
	s.mu.Unlock()
	return lows, true
}

// compactHeads writes every queue's head again at the end of the heads
// log and removes the segments before, once the log holds more than
// twice the live heads (and more than one segment).
func (s *Store) compactHeads() error {
	if s.heads.Stats().Segments < 3 {
		return nil
	}
	s.mu.Lock()
	if s.heads.Stats().Bytes < 2*s.headBytes+headsSlack {
		s.mu.Unlock()
		return nil
	}
	start := s.heads.Next()
	// Under s.mu, so that no queue's newer head lands before its copy
	// here (the newest record of a queue wins at open).
	bodies := make([][]byte, 0, 4096)
	var err error
	for _, sq := range s.byID {
		if !sq.hasHead {
			continue
		}
		if bodies = append(bodies, headRecord(sq.id, sq.head)); len(bodies) == cap(bodies) {
			_, _, err = s.heads.AppendBatch(bodies, nil)
			bodies = bodies[:0]
		}
		if err != nil {
			break
		}
	}
	if err == nil && len(bodies) > 0 {
		_, _, err = s.heads.AppendBatch(bodies, nil)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.heads.Sync(); err != nil {
		return err
	}
	_, err = s.heads.DropBefore(start)
	return err
}

// The heads log's segment size, and the bytes of old records beyond twice
// the live heads that start a compaction (variables so that tests can
// compact sooner).
var (
	headsSegmentBytes int64 = 4 << 20
	headsSlack        int64 = 8 << 20
)

// headRecord is the heads-log record of queue id's head h.
func headRecord(id uint32, h headState) []byte {
	b := make([]byte, 4, 4+headSize)
	binary.BigEndian.PutUint32(b, id)
	return append(b, encodeHead(h)...)
}
