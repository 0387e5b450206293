package engine

import (
	"errors"
	"fmt"
	"iter"
	"sort"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
)

// Record is one record read from the log. Body is a slice of the
// memory-mapped segment: no copy was made. It stays valid until Release is
// called, even if the log is closed in the meantime; after Release it must
// not be used. The mapping is read-only: writing into Body faults.
type Record struct {
	Offset  uint64
	Body    []byte
	section []byte
	seg     *segment.Segment
}

// Attrs parses the record's attributes section (empty Attrs when it has
// none). Group and Dedup point into the mapping, valid as long as Body.
func (r Record) Attrs() (Attrs, error) {
	if r.section == nil {
		return Attrs{}, nil
	}
	return record.ParseSection(r.section)
}

// Release gives the record's segment reference back. Call it exactly once
// for every Record returned by Read. Records yielded by Records need no
// Release (it is a no-op for them).
func (r Record) Release() {
	if r.seg != nil {
		r.seg.Release()
	}
}

// Read returns the record at offset, verified (checksum and id), without
// copying it. It returns an error wrapping ErrNotFound for an offset outside
// [First, Next), and one wrapping ErrCorrupt, naming the segment and
// position, for a damaged record.
func (l *Log) Read(offset uint64) (Record, error) {
	s, err := l.acquire(offset)
	if err != nil {
		return Record{}, err
	}
	v, _, err := s.Read(offset)
	if err != nil {
		s.Release()
		return Record{}, err
	}
	return Record{Offset: offset, Body: v.Body, section: v.Section, seg: s}, nil
}

// acquire finds the segment that holds offset and takes a reference on it.
func (l *Log) acquire(offset uint64) (*segment.Segment, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	next := l.next.Load()
	segs := *l.segs.Load()
	if offset >= next || len(segs) == 0 || offset < segs[0].Base() {
		return nil, notFound(offset, segs, next)
	}
	s := floorSegment(segs, offset)
	if !s.Acquire() {
		return nil, ErrClosed
	}
	return s, nil
}

func notFound(offset uint64, segs []*segment.Segment, next uint64) error {
	first := next
	if len(segs) > 0 {
		first = segs[0].Base()
	}
	return fmt.Errorf("%w: offset %d (the log holds [%d, %d))", ErrNotFound, offset, first, next)
}

// floorSegment returns the segment with the greatest base offset <= offset.
// The newest segment is tried first: most reads are of recent records.
func floorSegment(segs []*segment.Segment, offset uint64) *segment.Segment {
	last := segs[len(segs)-1]
	if offset >= last.Base() {
		return last
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].Base() > offset })
	return segs[i-1]
}

// Records iterates over the records from offset from to the end of the log
// (records appended while iterating are included). Each yielded Record is
// valid until the loop body returns; use Read to keep one longer. A damaged
// record is yielded as an error wrapping ErrCorrupt and the iteration goes
// on with the next record; a caller that wants to stop there breaks.
func (l *Log) Records(from uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if from < l.First() {
			from = l.First()
		}
		for from < l.next.Load() {
			s, err := l.acquire(from)
			if err != nil {
				yield(Record{}, err)
				return
			}
			next, more := scanSegment(s, from, yield)
			s.Release()
			if !more {
				return
			}
			from = next
		}
	}
}

// scanSegment yields the segment's records from offset on. It returns the
// first offset it did not yield, and false when the caller stopped.
func scanSegment(s *segment.Segment, from uint64, yield func(Record, error) bool) (uint64, bool) {
	sc := s.Scan(from)
	for off := from; ; off++ {
		v, _, err := sc.Next()
		if errors.Is(err, segment.ErrNotFound) {
			return off, true
		}
		if err != nil {
			if !yield(Record{Offset: off}, err) {
				return off, false
			}
			continue
		}
		if !yield(Record{Offset: off, Body: v.Body, section: v.Section}, nil) {
			return off, false
		}
	}
}

// OffsetForTime returns the first offset that may have been appended at or
// after t, from the time index. The time index is sparse (one entry per
// IndexIntervalBytes), so the answer errs early, never late: no record
// appended at or after t lies below it. It is exact to within about one
// index interval of records, two across a segment boundary (a segment's first
// record never has an entry); segments smaller than one interval have no
// entries at all. A time after the newest entry gives the offset after that
// entry's record.
func (l *Log) OffsetForTime(t time.Time) (uint64, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	ms := t.UnixMilli()
	segs := *l.segs.Load()
	answer := l.First()
	for _, s := range segs {
		x := s.TimeIndex()
		n := x.N
		if n == 0 {
			continue
		}
		i := x.Times.FirstAtOrAfter(n, ms)
		if i > 0 {
			_, rel := x.Times.Entry(i - 1)
			answer = s.Base() + uint64(rel) + 1
		}
		if i < n {
			return answer, nil
		}
	}
	return answer, nil
}
