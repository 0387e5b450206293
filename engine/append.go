package engine

import (
	"fmt"

	"github.com/pagelog/pagelog/internal/record"
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
	if err := attrs.Validate(); err != nil { // nil and empty attrs are valid
		return 0, err
	}
	size := record.Size(len(body), attrs)
	l.mu.Lock()
	off, err := l.appendLocked(size, attrs, body)
	if err != nil && l.freedForRetry(err) {
		off, err = l.appendLocked(size, attrs, body)
	}
	cuts := l.sync.cutCount.Load() // a Truncate takes l.mu
	l.mu.Unlock()
	if err != nil {
		return 0, err
	}
	l.wakeWaiters()
	if l.opts.Sync == SyncAlways {
		if err := l.sync.waitAppended(l, off+1, cuts); err != nil {
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
	off, _, err := s.AppendSized(attrs, body, size)
	if err != nil {
		return 0, err
	}
	l.appends++
	l.appendedBytes += uint64(size)
	l.next.Store(off + 1)
	l.published()
	end := s.End()
	l.pre.wrote(end)
	l.rolls.wrote(end)
	return off, nil
}

// appendManyLocked appends records from bodies[from:] into the active
// segment, rolling first if the next one does not fit, with one write for as
// many as the segment takes (see segment.AppendBatch). It returns how many
// it appended.
func (l *Log) appendManyLocked(attrs []*Attrs, bodies [][]byte, sizes []int, from int) (int, error) {
	if err := l.writable(); err != nil {
		return 0, err
	}
	s := l.active
	if s.Next() >= maxOffset {
		return 0, fmt.Errorf("%w: the next offset would be %d", ErrFull, s.Next())
	}
	if !s.Room(sizes[from]) {
		var err error
		if s, err = l.roll(); err != nil {
			return 0, err
		}
	}
	var a []*Attrs
	if attrs != nil {
		a = attrs[from:]
	}
	// Never past the last offset.
	count := min(len(bodies)-from, int(min(uint64(len(bodies)), maxOffset-s.Next())))
	k, err := s.AppendBatch(a, bodies[from:from+count], sizes[from:from+count])
	for _, size := range sizes[from : from+k] {
		l.appendedBytes += uint64(size)
	}
	l.appends += uint64(k)
	if k > 0 {
		l.next.Store(s.Next())
		l.published()
		end := s.End()
		l.pre.wrote(end)
		l.rolls.wrote(end)
	}
	return k, err
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
	first, n, cuts, err := l.appendBatch(bodies, attrs)
	if err != nil || n == 0 || l.opts.Sync != SyncAlways {
		return first, n, err
	}
	return first, n, l.sync.waitAppended(l, first+uint64(n), cuts)
}

// AppendBatchNoWait is AppendBatch without the wait for the sync under
// SyncAlways: it returns once the records are written, and the caller
// waits for them with WaitDurable (or Sync) when it chooses, for instance
// after it has released a lock of its own that others take between its
// appends. Until a sync covers them Durable stays below them. Under
// SyncNone and SyncInterval it is AppendBatch.
func (l *Log) AppendBatchNoWait(bodies [][]byte, attrs []*Attrs) (first uint64, n int, err error) {
	first, n, _, err = l.appendBatch(bodies, attrs)
	return first, n, err
}

// appendBatch writes the records of AppendBatch and returns the cut count
// its sync wait checks.
func (l *Log) appendBatch(bodies [][]byte, attrs []*Attrs) (first uint64, n int, cuts uint64, err error) {
	if attrs != nil && len(attrs) != len(bodies) {
		return 0, 0, 0, fmt.Errorf("pagelog: append batch: %d attribute sets for %d bodies", len(attrs), len(bodies))
	}
	sizes := make([]int, len(bodies))
	for i, body := range bodies {
		var a *Attrs
		if attrs != nil {
			a = attrs[i]
		}
		if len(body) > l.maxBody {
			return 0, 0, 0, fmt.Errorf("%w: body %d of the batch is %d bytes, limit %d", ErrTooLarge, i, len(body), l.maxBody)
		}
		if a != nil && !a.Empty() {
			if err := a.Validate(); err != nil {
				return 0, 0, 0, fmt.Errorf("body %d of the batch: %w", i, err)
			}
		}
		sizes[i] = record.Size(len(body), a)
	}
	l.mu.Lock()
	first = l.next.Load()
	retried := false
	for n < len(bodies) {
		var k int
		k, err = l.appendManyLocked(attrs, bodies, sizes, n)
		// A segment may take some records of its share and then fail
		// (a full disk at the next allocation step): those are in the log
		// and counted, with the error.
		if n == 0 && k > 0 {
			first = l.next.Load() - uint64(k)
		}
		n += k
		if err != nil && !retried && l.freedForRetry(err) {
			retried, err = true, nil
			continue
		}
		if err != nil {
			break
		}
	}
	cuts = l.sync.cutCount.Load()
	l.mu.Unlock()
	if n > 0 {
		l.wakeWaiters()
	}
	return first, n, cuts, err
}
