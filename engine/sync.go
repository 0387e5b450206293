package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// syncState is group commit: appenders that need durability wait for a sync
// that covers their record; the first waiter to find no sync running runs
// one for everybody, covering every record written before it started, while
// the next group gathers behind it.
type syncState struct {
	durable atomic.Uint64 // every offset below it is synced
	mu      sync.Mutex
	running bool
	done    chan struct{} // closed when the running sync ends
	err     error         // sticky: the first failed sync
	bad     atomic.Bool   // err is set: read without mu by every append
	syncs   atomic.Int64  // syncs run (for tests and metrics)

	// Figures of the syncs that moved durable (guarded by mu), for Stats.
	rounds    uint64
	took      time.Duration
	lastBatch uint64
	latency   [len(SyncBuckets) + 1]uint64
	point     recoveryPoint // where the newest sync reached in the active segment

	// cuts counts Truncate calls (guarded by mu): a sync that began before
	// a cut does not advance durable, since its target named records that
	// are gone and may have been written again since. cutCount mirrors it
	// for a look without mu, and cutLog holds the offsets of the latest
	// cuts (cut number cutBase+1 first), for an appender that must tell
	// whether its own record was cut and written again by another.
	cuts     uint64
	cutCount atomic.Uint64
	cutLog   []uint64
	cutBase  uint64

	// pending are sealed segments not known synced (guarded by Log.mu):
	// those sealed under SyncNone, and every segment found at Open. The
	// next sync covers them before it reports anything durable.
	pending []*segment.Segment
	// dirDirty: a segment file was created or removed since the directory
	// was last synced (guarded by Log.mu).
	dirDirty bool
}

// setDurable records what Open knows to be durable: offsets below next, and
// the active segment at base up to pos.
func (st *syncState) setDurable(next, base uint64, pos int64) {
	st.mu.Lock()
	st.durable.Store(next)
	st.point = recoveryPoint{Base: base, Pos: pos, Next: next}
	st.mu.Unlock()
}

// recoveryPoint returns where the newest successful sync reached.
func (st *syncState) recoveryPoint() recoveryPoint {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.point
}

// failed returns the sticky error, if a sync has failed.
// Every append asks, so a log that never failed answers with one atomic
// load, not a lock.
func (st *syncState) failed() error {
	if !st.bad.Load() {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}

// fail makes the log refuse appends from now on.
func (st *syncState) fail(cause error) {
	st.mu.Lock()
	st.failLocked(cause)
	st.mu.Unlock()
}

// failLocked sets the sticky error, if none is set. The caller holds mu.
func (st *syncState) failLocked(cause error) {
	if st.err == nil {
		st.err = fmt.Errorf("%w: %w", ErrSyncFailed, cause)
		st.bad.Store(true)
	}
}

// waitIdle waits until no sync is running.
func (st *syncState) waitIdle() {
	for {
		st.mu.Lock()
		if !st.running {
			st.mu.Unlock()
			return
		}
		ch := st.done
		st.mu.Unlock()
		<-ch
	}
}

// waitFor blocks until every offset below target is durable. A nil ctx
// never expires. Once Close has released the segments, what is not durable
// gets ErrClosed: no sync can cover it any more.
func (st *syncState) waitFor(l *Log, target uint64, ctx context.Context) error {
	return st.wait(l, target, ctx, false)
}

// wait is waitFor; with all, the target is "everything appended": it
// follows a Truncate down instead of failing.
func (st *syncState) wait(l *Log, target uint64, ctx context.Context, all bool) error {
	for {
		if st.durable.Load() >= target {
			return nil
		}
		if next := l.next.Load(); target > next {
			if all {
				target = next
				continue
			}
			// Truncate cut the offsets waited for: no sync will cover them.
			return fmt.Errorf("%w: offset %d was cut by Truncate (the log ends at %d)", ErrNotFound, target-1, next)
		}
		st.mu.Lock()
		if st.err != nil {
			err := st.err
			st.mu.Unlock()
			return err
		}
		if st.durable.Load() >= target {
			st.mu.Unlock()
			return nil
		}
		if ctx != nil && ctx.Err() != nil {
			// A done context changes nothing: no sync is started for it.
			st.mu.Unlock()
			return ctx.Err()
		}
		if !st.running {
			st.running = true
			st.done = make(chan struct{})
			st.mu.Unlock()
			if ctx != nil {
				// The sync runs for every waiter, whatever becomes of this
				// one's context: it is run beside it, so that a cancel
				// returns at once even while an fdatasync hangs.
				res := make(chan error, 1)
				go func() {
					runtime.Gosched()
					res <- st.run(l)
				}()
				select {
				case err := <-res:
					if err != nil {
						return err // ErrClosed: the log was closed under the sync
					}
					continue
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			// Let appenders that are ready to run put their records in
			// first, so that this sync covers them too: the group grows
			// at the cost of one scheduler pass, and a lone appender
			// loses nothing.
			runtime.Gosched()
			if err := st.run(l); err != nil {
				return err
			}
			continue
		}
		ch := st.done
		st.mu.Unlock()
		if ctx == nil {
			<-ch
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// run performs one sync as the leader: it notes how far the log is written,
// syncs the active segment (sealed ones were synced when sealed), and
// releases every waiter below that point. It returns ErrClosed, and moves
// nothing, when the log's segments are already closed: nothing was synced.
func (st *syncState) run(l *Log) error {
	l.mu.Lock()
	target := l.next.Load()
	s := l.active
	ok := s != nil && s.Acquire()
	var point recoveryPoint
	if ok {
		point = recoveryPoint{Base: s.Base(), Pos: s.End(), Next: target}
	}
	pending := st.pending
	st.pending = nil
	dirDirty := st.dirDirty
	st.dirDirty = false
	st.mu.Lock()
	cuts := st.cuts
	st.mu.Unlock()
	l.mu.Unlock()
	began := time.Now()
	var err error
	for i, p := range pending {
		if p == s {
			continue
		}
		if err = syncSealed(p); err != nil {
			// Keep the rest for the next attempt; the failure is sticky anyway.
			l.mu.Lock()
			st.pending = append(st.pending, pending[i:]...)
			l.mu.Unlock()
			break
		}
	}
	// Sealed segments first, then the directory entries of the new ones.
	if dirDirty && err == nil {
		err = syncDir(l.dir)
	}
	var closed error
	if ok {
		if err == nil {
			err = s.Sync()
		}
		s.Release()
	} else {
		closed = ErrClosed
	}
	st.syncs.Add(1)
	st.mu.Lock()
	if closed != nil {
		// Not a failed sync: the log was closed under the leader.
	} else if err != nil {
		st.failLocked(err)
	} else {
		st.noteSync(time.Since(began), target-min(target, st.durable.Load()))
		if target > st.durable.Load() && cuts == st.cuts {
			st.durable.Store(target)
			st.point = point
		}
	}
	st.running = false
	close(st.done)
	st.mu.Unlock()
	return closed
}

// syncSealed syncs a sealed segment that waited for a sync. One that
// DropBefore removed meanwhile needs none: it left the log (the directory
// sync records its removal).
func syncSealed(p *segment.Segment) error {
	if !p.Hold() { // its file, not its bytes: an evicted segment stays unmapped
		return nil
	}
	defer p.Release()
	err := p.Sync()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// cut notes a Truncate to next: what is durable is at most the new end,
// and a sync that began before the cut moves nothing.
//
// The recovery point goes too when it lies past the cut: the checkpointer
// must never write one that says the log reached offsets it no longer
// holds (a reopen would take them for lost and leave a hole). cutDone
// sets the new one once the Truncate has synced its copy.
func (st *syncState) cut(next uint64) {
	st.mu.Lock()
	st.cuts++
	st.cutCount.Store(st.cuts)
	st.cutLog = append(st.cutLog, next)
	if len(st.cutLog) > maxCutLog {
		k := len(st.cutLog) - maxCutLog/2
		st.cutLog = slices.Delete(st.cutLog, 0, k)
		st.cutBase += uint64(k)
	}
	if st.durable.Load() > next {
		st.durable.Store(next)
	}
	if st.point.Next > next {
		st.point = recoveryPoint{}
	}
	st.mu.Unlock()
}

// maxCutLog bounds cutLog; an appender that waited through more cuts than
// it keeps is told its record was cut (see cutSince).
const maxCutLog = 1024

// cutDone records p, where a finished Truncate left the log synced, as
// the recovery point if cut took the old one away and every offset below
// p.Next was durable before the cut.
func (st *syncState) cutDone(p recoveryPoint) {
	st.mu.Lock()
	if st.point == (recoveryPoint{}) && st.durable.Load() >= p.Next {
		st.point = p
	}
	st.mu.Unlock()
}

// cutSince reports whether a Truncate after the cut numbered since cut an
// offset below target: an appender's record that such a cut removed may
// have been written again by another appender, and a sync covering that
// one says nothing of its own.
func (st *syncState) cutSince(since, target uint64) bool {
	if st.cutCount.Load() == since {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if since < st.cutBase {
		return true // too long ago to tell
	}
	for _, c := range st.cutLog[since-st.cutBase:] {
		if c < target {
			return true
		}
	}
	return false
}

// waitAppended is waitFor for an appender whose records end below target,
// appended when cutCount was cuts.
func (st *syncState) waitAppended(l *Log, target, cuts uint64) error {
	if err := st.waitFor(l, target, nil); err != nil {
		return err
	}
	if st.cutSince(cuts, target) {
		return fmt.Errorf("%w: offset %d was cut by Truncate before a sync covered it", ErrNotFound, target-1)
	}
	return nil
}

// syncNow syncs everything written so far and waits for it.
func (l *Log) syncNow() error {
	return l.sync.wait(l, l.next.Load(), nil, true)
}

// Sync makes every record appended so far durable (one fdatasync, shared
// with concurrent callers).
func (l *Log) Sync() error {
	if l.readOnly {
		return ErrReadOnly
	}
	if l.closed.Load() {
		return ErrClosed
	}
	return l.syncNow()
}

// WaitDurable blocks until a sync covers the record at offset (starting one
// if none is running), so a caller appending under SyncNone or SyncInterval
// can batch and still know when its data is safe. It returns ctx.Err() if
// ctx ends first, and the sticky error if a sync failed.
func (l *Log) WaitDurable(ctx context.Context, offset uint64) error {
	if l.readOnly {
		return ErrReadOnly
	}
	if l.closed.Load() {
		return ErrClosed
	}
	if offset >= l.next.Load() {
		return fmt.Errorf("%w: offset %d not yet appended", ErrNotFound, offset)
	}
	return l.sync.waitFor(l, offset+1, ctx)
}

// Durable returns the offset below which every record is known synced.
func (l *Log) Durable() uint64 { return l.sync.durable.Load() }

// intervalSyncer is the background loop of SyncInterval.
func (l *Log) intervalSyncer() {
	defer l.bg.Done()
	t := time.NewTicker(l.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if l.sync.durable.Load() < l.next.Load() {
				_ = l.syncNow()
			}
		}
	}
}

// checkpointEvery is how often the recovery point is written when syncs
// have moved it.
const checkpointEvery = time.Second

// checkpointer writes the recovery point (log.recovery) now and then: the
// place below which the active segment is known synced, so that recovery
// tells damage there from a torn tail past it.
func (l *Log) checkpointer() {
	defer l.bg.Done()
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	var written recoveryPoint
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			cuts := l.sync.cutCount.Load()
			p := l.sync.recoveryPoint()
			if p != written && p.Pos > 0 && l.sync.failed() == nil {
				if replaceFile(l.dir, recoveryName, p.encode(), l.opts.FileMode) == nil {
					written = p
				}
				if l.sync.cutCount.Load() != cuts {
					// A Truncate began meanwhile and may have removed
					// the file before this one replaced it with a point
					// past its cut: the next tick writes its own.
					_ = os.Remove(filepath.Join(l.dir, recoveryName))
					written = recoveryPoint{}
				}
			}
		}
	}
}

// startSyncers starts the background syncer of SyncInterval and the
// recovery-point checkpointer.
func (l *Log) startSyncers() {
	if l.opts.Sync == SyncInterval {
		l.bg.Add(1)
		go l.intervalSyncer()
	}
	if l.opts.Sync != SyncNone {
		l.bg.Add(1)
		go l.checkpointer()
	}
}
