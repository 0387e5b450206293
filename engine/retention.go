package engine

import (
	"errors"
	"fmt"
	"slices"

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
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	segs := *l.segs.Load()
	k := 0
	for k < len(segs)-1 && segs[k+1].Base() <= offset {
		k++
	}
	if k == 0 {
		return 0, nil
	}
	gone := segs[:k]
	l.publish(slices.Clone(segs[k:]))
	l.sync.pending = slices.DeleteFunc(l.sync.pending, func(s *segment.Segment) bool {
		return slices.Contains(gone, s)
	})
	var errs []error
	for _, s := range gone {
		removeSegmentFiles(l.dir, s.Base())
		errs = append(errs, s.Close())
	}
	errs = append(errs, syncDir(l.dir))
	return k, errors.Join(errs...)
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
	old.MissingUpTo(next)
	l.next.Store(next)
	if err := syncDir(l.dir); err != nil {
		l.sync.fail(err)
		return err
	}
	return nil
}
