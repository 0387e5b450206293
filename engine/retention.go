package engine

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// DropBefore removes, oldest first, every whole segment whose records all
// lie below offset; the active segment is never removed. Records that
// callers still hold stay valid until released: a segment's mapping goes
// only with its last reference. It returns how many segments were removed.
//
// Removal is crash-safe: files go oldest first, so a crash leaves a
// contiguous suffix of the log, and the directory is synced at the end.
func (l *Log) DropBefore(offset uint64) (int, error) {
	l.dropMu.Lock()
	defer l.dropMu.Unlock()
	l.mu.Lock()
	gone, err := l.dropBeforeLocked(offset)
	l.unlockYield()
	return l.finishDrop(gone, err)
}

// DropPoint returns the lowest offset for which DropBefore would remove a
// segment now: the base of the second oldest segment, below which every
// record of the oldest one lies. ok is false while the log has only its
// active segment, which is never removed. It takes no lock: a caller that
// moves a head through the log can ask it once per segment and drop
// segments as soon as the head leaves them (the work queue does).
func (l *Log) DropPoint() (offset uint64, ok bool) {
	segs := *l.segs.Load()
	if len(segs) < 2 {
		return 0, false
	}
	return segs[1].Base(), true
}

// dropBeforeLocked takes the segments below offset out of the log, under
// l.mu; finishDrop, after l.mu is let go, takes their files out of the
// log's names, gives back the log's references and syncs the directory.
// Both run under l.dropMu. Measured in a queue's steady state: holding the
// append lock through all of it (and through the wait for a background
// seal, needed only when the segment being sealed goes too) made sends of
// 1-15 ms at every drop; holding it through the renames and removals
// alone still made sends and deletes of 1.5-2.8 ms, 26 of the 41 waits
// over 1 ms of a run's sender (an execution trace: every one of them
// released by DropBefore). The segments are out of the list before their
// files go, so nothing looks the files up by their names meanwhile.
func (l *Log) dropBeforeLocked(offset uint64) ([]*segment.Segment, error) {
	if err := l.writable(); err != nil {
		return nil, err
	}
	segs := *l.segs.Load()
	k := 0
	for k < len(segs)-1 && segs[k+1].Base() <= offset {
		k++
	}
	if k == 0 {
		return nil, nil
	}
	if k == len(segs)-1 {
		l.awaitSeal() // the newest sealed segment goes: its seal must end first
	}
	gone := segs[:k]
	l.departed(gone...)
	l.publish(slices.Clone(segs[k:]))
	l.sync.pending = slices.DeleteFunc(l.sync.pending, func(s *segment.Segment) bool {
		return slices.Contains(gone, s)
	})
	return gone, nil
}

// unlockYield lets go of l.mu on a goroutine that is not the appender's,
// and yields its P. An appender that waited for the lock is readied into
// this P's next slot, and there it waits until this goroutine blocks or is
// preempted: in a queue's steady state the checkpoint goroutine went on
// with the drop's removals and syncs, and sends that had waited 3 µs for
// the lock waited 1.5-2.8 ms more for a CPU (an execution trace of a run:
// 16-33 such waits over 1 ms per 4 GiB, 1-4 with the yield).
func (l *Log) unlockYield() {
	l.mu.Unlock()
	runtime.Gosched()
}

// finishDrop ends a drop outside l.mu, under l.dropMu: the files of the
// gone segments are removed or kept for reuse, oldest first, the log's
// references to them are given back (the last holder unmaps), and the
// directory is synced. It returns how many segments went.
func (l *Log) finishDrop(gone []*segment.Segment, err error) (int, error) {
	if len(gone) == 0 {
		return 0, err
	}
	for _, s := range gone {
		s.MarkDropped() // a reader's index rebuild no longer writes files
		if !l.recycleDropped(s) {
			removeSegmentFiles(l.dir, s.Base())
		}
	}
	var errs []error
	for _, s := range gone {
		errs = append(errs, s.Close())
	}
	errs = append(errs, syncDir(l.dir))
	return len(gone), errors.Join(errs...)
}

// retentionEvery is how often retention is checked besides at each roll.
const retentionEvery = time.Second

// retainLoop applies Options.RetentionBytes and RetentionAge: at each roll
// and at least once a second.
func (l *Log) retainLoop(kick <-chan struct{}) {
	defer l.bg.Done()
	t := time.NewTicker(retentionEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-kick:
		}
		_, _ = l.retain()
	}
}

// retain drops, oldest first and through the same path as DropBefore, the
// sealed segments that retention lets go: while the log's segments take
// more than RetentionBytes, and while the oldest one's newest record (or
// its seal, when its time index has no entry) is older than RetentionAge.
// The active segment is never dropped. It returns how many segments went.
func (l *Log) retain() (int, error) {
	segs := *l.segs.Load()
	k := 0
	if max := l.opts.RetentionBytes; max > 0 {
		var total int64
		for _, s := range segs {
			total += s.DiskBytes()
		}
		for k < len(segs)-1 && total > max {
			total -= segs[k].DiskBytes()
			k++
		}
	}
	if age := l.opts.RetentionAge; age > 0 {
		cutoff := l.opts.now().Add(-age).UnixMilli()
		for k < len(segs)-1 {
			ms, ok := segs[k].NewestTime()
			if !ok || ms >= cutoff {
				break
			}
			k++
		}
	}
	if k == 0 {
		return 0, nil
	}
	l.dropMu.Lock()
	defer l.dropMu.Unlock()
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	if !slices.Contains(*l.segs.Load(), segs[k]) {
		l.mu.Unlock()
		return 0, nil // the log changed meanwhile (a Truncate): look again next time
	}
	gone, err := l.dropBeforeLocked(segs[k].Base())
	l.unlockYield()
	return l.finishDrop(gone, err)
}

// SkipTo makes next the offset of the next record, leaving [Next(), next)
// as a range of offsets that no segment holds: reads of them give an error
// matching ErrCorrupt, and Verify, Records and Inspect report the range as
// missing. It exists for a layer above the log that knows offsets were
// given out whose records the log lost (a power failure under SyncNone or
// SyncInterval took its unsynced tail, while the layer's own checkpoint
// survived: the queue), so that no offset is ever given to two records.
// The new segment's directory entry is synced when it returns. A next at
// or below Next() does nothing.
func (l *Log) SkipTo(next uint64) error {
	defer l.wakeWaiters() // after the unlock: Wait of a skipped offset returns
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	old := l.active
	if next <= old.Next() {
		return nil
	}
	if next >= maxOffset {
		return fmt.Errorf("%w: SkipTo(%d): the last offset is %d", ErrFull, next, uint64(maxOffset-1))
	}
	if _, err := l.rollTo(next); err != nil {
		return err
	}
	l.awaitSeal() // MissingUpTo marks a sealed segment
	old.MissingUpTo(next)
	l.next.Store(next)
	l.published()
	if err := syncDir(l.dir); err != nil {
		l.sync.fail(err)
		return err
	}
	return nil
}

// Gaps returns the ranges [from, to) of offsets at or above from, below
// Next, that no segment file holds: offsets a checkpoint knew were used but
// whose records a power failure lost (see SkipTo), or the records of a
// segment file removed by hand. It checks the index of every sealed
// segment from there on (a walk from each one's last index entry, once).
// The queue uses it at open, so that no offset in a gap is ever handed out.
func (l *Log) Gaps(from uint64) [][2]uint64 {
	var out [][2]uint64
	segs := *l.segs.Load()
	for i, s := range segs {
		if i+1 < len(segs) && segs[i+1].Base() <= from {
			continue
		}
		if !s.Acquire() {
			continue
		}
		a, b := s.Missing()
		s.Release()
		if a < b && b > from {
			out = append(out, [2]uint64{max(a, from), b})
		}
	}
	return out
}

// SegmentOf tells where offset lies among the log's segments as they
// stand: base and end, the offsets that begin the segment holding it and
// the one after it (Next for the newest); i, the segment's index (0 the
// oldest; the first segment for an offset below it, the newest for one
// at or past Next); n, how many segments the log has (0: none, and base
// and end are Next). A Store uses it to tell which queues hold its oldest
// segments, without reading them.
func (l *Log) SegmentOf(offset uint64) (base, end uint64, i, n int) {
	segs := *l.segs.Load()
	n = len(segs)
	if n == 0 {
		next := l.next.Load()
		return next, next, 0, 0
	}
	lo, hi := 1, n // segs[lo-1] is the last known to start at or below offset
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); segs[m].Base() <= offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	i = lo - 1
	end = l.next.Load()
	if i+1 < n {
		end = segs[i+1].Base()
	}
	return segs[i].Base(), end, i, n
}
