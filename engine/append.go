package engine

import (
	"fmt"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
)

// Attrs are a record's optional attributes (FORMAT.md): a due time, an
// ordering group, a deduplication id, and the fields of copied or moved
// records. Group and Dedup are present when non-nil (1-128 bytes).
type Attrs = record.Attrs

// Append writes body as the next record and returns its offset. When it
// returns depends on Options.Sync. A body larger than MaxRecordBytes gets
// ErrTooLarge and writes nothing; ErrFull once the offsets are used up. The
// log keeps no reference to body. Under SyncAlways, a Truncate that cuts
// the record before a sync covered it makes Append return an error
// matching ErrNotFound: the record is gone.
func (l *Log) Append(body []byte) (uint64, error) {
	return l.AppendWith(body, nil)
}

// AppendWith appends a record with attributes (nil for none).
func (l *Log) AppendWith(body []byte, attrs *Attrs) (uint64, error) {
	if len(body) > l.maxBody {
		return 0, fmt.Errorf("%w: body of %d bytes, limit %d", ErrTooLarge, len(body), l.maxBody)
	}
	if attrs != nil && !attrs.Empty() {
		if err := attrs.Validate(); err != nil {
			return 0, err
		}
	}
	size := record.Size(len(body), attrs)
	l.mu.Lock()
	off, err := l.appendLocked(size, attrs, body)
	l.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if l.opts.Sync == SyncAlways {
		if err := l.sync.waitFor(l, off+1, nil); err != nil {
			return 0, err
		}
	}
	return off, nil
}

func (l *Log) appendLocked(size int, attrs *Attrs, body []byte) (uint64, error) {
	if err := l.writable(); err != nil {
		return 0, err
	}
	s := l.active
	if s.Next() >= maxOffset {
		return 0, fmt.Errorf("%w: the next offset would be %d", ErrFull, s.Next())
	}
	if !s.Room(size) {
		var err error
		if s, err = l.roll(); err != nil {
			return 0, err
		}
	}
	off, _, err := s.Append(attrs, body)
	if err != nil {
		return 0, err
	}
	l.next.Store(off + 1)
	l.pre.wrote(s.End())
	return off, nil
}

// writable reports why appends are refused, if they are.
func (l *Log) writable() error {
	switch {
	case l.closed.Load():
		return ErrClosed
	case l.readOnly:
		return ErrReadOnly
	}
	return l.sync.failed()
}

// roll seals the active segment and starts the next one, named after the
// next offset. The new segment is created first, so that a full disk leaves
// the active segment as it was and the append can be retried. Under
// SyncAlways the sealed files are synced before the new directory entry.
func (l *Log) roll() (*segment.Segment, error) {
	return l.rollTo(l.active.Next())
}

// rollTo is roll with the new segment's base given: above the active
// segment's next offset only when offsets known to be used were lost (see
// skipLostOffsets).
func (l *Log) rollTo(base uint64) (*segment.Segment, error) {
	old := l.active
	s, err := segment.Create(l.cfg, base)
	if err != nil {
		return nil, err
	}
	syncing := l.opts.Sync != SyncNone
	if err := old.Seal(syncing); err != nil {
		_ = s.Close()
		removeSegmentFiles(l.dir, s.Base())
		// A half-sealed segment must never be appended to again (its file
		// may already be trimmed under the mapping): refuse appends until
		// the log is reopened and recovered.
		l.sync.fail(fmt.Errorf("seal %s: %w", old.Path(), err))
		return nil, err
	}
	if syncing {
		if err := syncDir(l.dir); err != nil {
			l.sync.fail(err)
			return nil, err
		}
	}
	if !syncing {
		l.sync.pending = append(l.sync.pending, old)
		l.sync.dirDirty = true
	}
	segs := append(*l.segs.Load(), s)
	l.publish(segs)
	l.active = s
	l.pre.rolled(s)
	return s, nil
}

// AppendBatch appends bodies as consecutive records under one lock and, under
// SyncAlways, one sync for the whole batch, and returns the offset of the
// first. attrs is nil or holds one entry (nil for none) per body. Every body
// and attribute set is checked before anything is written, so ErrTooLarge or
// a bad attribute writes nothing. An error after the first record was
// written (a full disk at a roll, a failed sync) leaves records
// [first, first+n) in the log, unsynced unless a later sync covers them:
// n says how many, and a caller that needs all or nothing calls
// Truncate(first).
func (l *Log) AppendBatch(bodies [][]byte, attrs []*Attrs) (first uint64, n int, err error) {
	if attrs != nil && len(attrs) != len(bodies) {
		return 0, 0, fmt.Errorf("pagelog: append batch: %d attribute sets for %d bodies", len(attrs), len(bodies))
	}
	sizes := make([]int, len(bodies))
	for i, body := range bodies {
		var a *Attrs
		if attrs != nil {
			a = attrs[i]
		}
		if len(body) > l.maxBody {
			return 0, 0, fmt.Errorf("%w: body %d of the batch is %d bytes, limit %d", ErrTooLarge, i, len(body), l.maxBody)
		}
		if a != nil && !a.Empty() {
			if err := a.Validate(); err != nil {
				return 0, 0, fmt.Errorf("body %d of the batch: %w", i, err)
			}
		}
		sizes[i] = record.Size(len(body), a)
	}
	l.mu.Lock()
	first = l.next.Load()
	for i, body := range bodies {
		var a *Attrs
		if attrs != nil {
			a = attrs[i]
		}
		var off uint64
		if off, err = l.appendLocked(sizes[i], a, body); err != nil {
			break
		}
		if n == 0 {
			first = off
		}
		n++
	}
	l.mu.Unlock()
	if err != nil || n == 0 {
		return first, n, err
	}
	if l.opts.Sync == SyncAlways {
		if err := l.sync.waitFor(l, first+uint64(n), nil); err != nil {
			return first, n, err
		}
	}
	return first, n, nil
}
