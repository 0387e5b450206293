package engine

import (
	"errors"
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
