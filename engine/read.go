package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
)

// Record is one record read from the log. Body is a slice of the
// memory-mapped segment: no copy was made. It stays valid until Release is
// called, even if the log is closed or the record's segment dropped in the
// meantime; after Release it must not be used. The mapping is read-only:
// writing into Body faults.
type Record struct {
	Offset  uint64
	Body    []byte
	section []byte
	seg     *segment.Segment
	hold    *hold
	gen     uint64
}

// hold makes a Record's claim on its segment (one reference) given back
// once: by the first Release of the Record or of any copy of it. Holds are
// reused; gen tells a hold's owners apart, so that a Release by a stale
// copy finds another generation and does nothing. The segment itself
// travels in the Record: a hold is written once per claim (the CAS of its
// first Release), not also when it is taken and given back, which kept
// two more atomic exchanges on every verified read.
type hold struct {
	gen atomic.Uint64
}

var holds = sync.Pool{New: func() any { return new(hold) }}

// Attrs parses the record's attributes section (empty Attrs when it has
// none). Group and Dedup point into the mapping, valid as long as Body.
func (r Record) Attrs() (Attrs, error) {
	if r.section == nil {
		return Attrs{}, nil
	}
	return record.ParseSection(r.section)
}

// Segment returns the base offset of the segment that holds the record
// (the number in its file's name), and false for a Record already released
// or never read. Two records of one log with the same Segment share one
// mapping: holding either keeps both bodies valid.
func (r Record) Segment() (uint64, bool) {
	h := r.hold
	if h == nil || r.seg == nil || h.gen.Load() != r.gen {
		return 0, false
	}
	return r.seg.Base(), true
}

// Release gives the record's segment reference back. Call it once for
// every Record returned by Read; a second Release, of the Record or of a
// copy of it, does nothing. Records yielded by Records need no Release
// (it is a no-op for them).
func (r Record) Release() {
	h := r.hold
	if h == nil || !h.gen.CompareAndSwap(r.gen, r.gen+1) {
		return
	}
	holds.Put(h)
	r.seg.Release()
}

// Read returns the record at offset, verified (checksum and id), without
// copying it. It returns an error wrapping ErrNotFound for an offset outside
// [First, Next) (ErrTrimmed for one dropped from the front), and one
// wrapping ErrCorrupt, naming the segment and position, for a damaged
// record.
func (l *Log) Read(offset uint64) (Record, error) {
	s, err := l.acquire(offset)
	if err != nil {
		return Record{}, err
	}
	v, _, err := s.Read(offset)
	if err != nil {
		err = l.droppedUnder(s, offset, err)
		s.Release()
		return Record{}, err
	}
	h := holds.Get().(*hold)
	s.NoteRead()
	return Record{Offset: offset, Body: v.Body, section: v.Section, seg: s, hold: h, gen: h.gen.Load()}, nil
}

// acquire finds the segment that holds offset and takes a reference on it.
// A segment dropped between the lookup and the reference is looked up
// again: only a closed log gives ErrClosed.
func (l *Log) acquire(offset uint64) (*segment.Segment, error) {
	for {
		if l.closed.Load() {
			return nil, ErrClosed
		}
		next := l.next.Load()
		if offset >= next && l.fol != nil {
			next = l.Next() // a follower looks for it first
		}
		segs := *l.segs.Load()
		if offset >= next || len(segs) == 0 || offset < segs[0].Base() {
			return nil, l.notFound(offset, segs, next)
		}
		s := floorSegment(segs, offset)
		if s.Acquire() {
			return s, nil
		}
	}
}

// ErrTrimmed is returned (wrapped, with the range) for an offset that the
// log held once but has dropped from its front: by DropBefore, retention
// or a queue's head. It matches ErrNotFound.
var ErrTrimmed error = trimmedError{}

type trimmedError struct{}

func (trimmedError) Error() string { return "pagelog: offset dropped from the front of the log" }
func (trimmedError) Unwrap() error { return ErrNotFound }

func (l *Log) notFound(offset uint64, segs []*segment.Segment, next uint64) error {
	first := next
	if len(segs) > 0 {
		first = segs[0].Base()
	}
	if offset < first && offset >= l.meta.FirstOffset {
		return fmt.Errorf("%w: offset %d (the log holds [%d, %d))", ErrTrimmed, offset, first, next)
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
// valid until the loop body returns; use Read to keep one longer.
//
// A damaged record is yielded as an error wrapping ErrCorrupt and the
// iteration goes on with the next record; a caller that wants to stop there
// breaks. Offsets the log has dropped from its front (from below First, or
// dropped while iterating) are yielded once as an error wrapping ErrTrimmed
// that says how many were lost, and the iteration goes on at the first
// record still there. When Truncate cuts the log at or below the iteration,
// an error wrapping ErrNotFound says so and the iteration ends.
func (l *Log) Records(from uint64) iter.Seq2[Record, error] {
	return l.records(from, false)
}

// RecordsWithAttrs is Records for a walk that only wants the records that
// carry an attributes section (a queue's open looks for dedup ids and
// moved copies in its whole backlog). A record whose header says it has
// none is stepped over by its header alone: its length, and its id
// checked against the offset, without computing its checksum. It yields
// every record with attributes, verified, and may yield some without (the
// first of a segment, one after damage). Damage inside a record stepped
// over is not reported; a header that does not check out is read and
// verified as Records does, which reports it.
func (l *Log) RecordsWithAttrs(from uint64) iter.Seq2[Record, error] {
	return l.records(from, true)
}

func (l *Log) records(from uint64, attrsOnly bool) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		cuts := l.cuts.Load()
		for tries := 0; from < l.Next(); tries++ {
			if first := l.First(); from < first {
				if lost := max(from, l.meta.FirstOffset); lost < first {
					err := fmt.Errorf("%w: offsets [%d, %d) dropped before they were read: %d records lost",
						ErrTrimmed, lost, first, first-lost)
					if !yield(Record{Offset: lost}, err) {
						return
					}
				}
				from = first
				continue
			}
			s, err := l.acquire(from)
			if errors.Is(err, ErrNotFound) {
				// Dropped or cut meanwhile: the loop looks again, not in
				// a tight loop if the log does not settle.
				_ = backOff(context.Background(), tries)
				continue
			}
			if err != nil {
				yield(Record{Offset: from}, err)
				return
			}
			next, more := l.scanSegment(s, from, cuts, attrsOnly, yield)
			s.Release()
			if !more {
				return
			}
			if next != from {
				tries = -1 // progress: the next look is a quick one
			} else {
				// A segment that ends short of the log's end (a reader
				// of a log its writer changes): look again, backing off.
				_ = backOff(context.Background(), tries)
			}
			from = next
		}
	}
}

// scanSegment yields the segment's records from offset on (with attrsOnly,
// see RecordsWithAttrs). It returns the first offset it did not yield, and
// false when the iteration must end.
func (l *Log) scanSegment(s *segment.Segment, from uint64, cuts *cutHistory, attrsOnly bool, yield func(Record, error) bool) (uint64, bool) {
	sc := s.Scan(from)
	mf, mt := s.Missing()
	for off := from; ; off++ {
		if off >= mf && off < mt {
			// A range no segment holds: reported once, not per offset.
			_, _, err := s.Read(off)
			if err = l.droppedUnder(s, off, err); errors.Is(err, ErrTrimmed) {
				return s.Next(), yield(Record{Offset: off}, err)
			}
			return mt, yield(Record{Offset: off}, fmt.Errorf("%w (offsets [%d, %d))", err, off, mt))
		}
		if attrsOnly && sc.SkipPlain() {
			continue
		}
		v, _, err := sc.Next()
		if c := l.cuts.Load(); c.epoch != cuts.epoch && off >= c.lowestSince(cuts.epoch) {
			yield(Record{Offset: off}, fmt.Errorf("%w: offset %d and those after it were cut by Truncate while iterating", ErrNotFound, off))
			return off, false
		}
		if errors.Is(err, segment.ErrNotFound) {
			if off < s.Next() && l.readOnly && s.Removed() {
				// Not the segment's end: its file left the log after this
				// log opened it (a segment not mapped then, or evicted
				// since). Its writer dropped it; the list of this log
				// still holds it, so the loop must go on past it. (A
				// copy a cut renamed over the name holds records still
				// in the log: the loop looks again, and the log finds
				// the copy once it sees the cut.)
				return s.Next(), yield(Record{Offset: off}, l.droppedUnder(s, off, err))
			}
			return off, true
		}
		if err != nil {
			if err = l.droppedUnder(s, off, err); errors.Is(err, ErrTrimmed) {
				return s.Next(), yield(Record{Offset: off}, err)
			}
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

// droppedUnder returns err, the failed read of offset in s, or for a log
// opened read-only whose writer (another process) dropped s meanwhile, an
// error wrapping ErrTrimmed: the writer may reuse a dropped segment's file
// at once (Options.RecycleSegments), and its bytes then turn to zeros or
// to a later segment's records under this log's mapping. That is the
// drop's doing, not damage. A segment whose name still holds a file keeps
// its error: the same file, or a copy a cut renamed over it (Truncate),
// whose records below the cut are still the log's.
func (l *Log) droppedUnder(s *segment.Segment, offset uint64, err error) error {
	if !l.readOnly || errors.Is(err, ErrTrimmed) || !s.Removed() {
		return err
	}
	return &droppedError{from: offset, next: s.Next(), name: segment.Name(s.Base(), segment.LogSuffix), cause: err}
}

// droppedError is droppedUnder's error: offsets [from, next) were in a
// segment that the writer dropped while this log read it.
type droppedError struct {
	from, next uint64
	name       string
	cause      error
}

func (e *droppedError) Error() string {
	return fmt.Sprintf("%v: offsets [%d, %d): segment %s was dropped by the log's writer while it was read (%v)",
		ErrTrimmed, e.from, e.next, e.name, e.cause)
}

func (e *droppedError) Unwrap() error { return ErrTrimmed }

// cutHistory is what Truncate has cut, for iterators that must not yield
// a cut record: an epoch that grows with every cut, and the offsets of the
// recent cuts. A Log publishes an immutable one through an atomic pointer.
type cutHistory struct {
	epoch uint64
	cuts  []cut // the newest last; at most maxCutHistory
}

type cut struct{ epoch, offset uint64 }

const maxCutHistory = 64

// with returns the history with a cut at offset added.
func (h *cutHistory) with(offset uint64) *cutHistory {
	cuts := append(h.cuts[max(0, len(h.cuts)-maxCutHistory+1):len(h.cuts):len(h.cuts)], cut{h.epoch + 1, offset})
	return &cutHistory{epoch: h.epoch + 1, cuts: cuts}
}

// lowestSince returns the lowest offset cut after epoch (0 when the history
// does not reach back that far).
func (h *cutHistory) lowestSince(epoch uint64) uint64 {
	low := uint64(maxOffset)
	if len(h.cuts) == 0 || h.cuts[0].epoch > epoch+1 {
		return 0
	}
	for _, c := range h.cuts {
		if c.epoch > epoch {
			low = min(low, c.offset)
		}
	}
	return low
}

// OffsetForTime returns the first offset that may have been appended at or
// after t, from the time index. The time index is sparse (one entry per
// IndexIntervalBytes), so the answer errs early, never late: no record
// appended at or after t lies below it. It is exact to within about one
// index interval of records, two across a segment boundary (a segment's first
// record never has an entry); segments smaller than one interval have no
// entries at all. A time after the newest entry gives the offset after that
// entry's record. It may run beside appends, DropBefore and Close.
func (l *Log) OffsetForTime(t time.Time) (uint64, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	ms := t.UnixMilli()
	segs := *l.segs.Load()
	answer := l.First()
	for _, s := range segs {
		if n, lastMs, lastRel, ok := s.TimeEnd(); ok && (n == 0 || lastMs < ms) {
			// A sealed segment that ends before t, known without
			// mapping it: a log of more segments than MaxMappedSegments
			// is searched without mapping every one on the way.
			if n > 0 {
				answer = s.Base() + uint64(lastRel) + 1
			}
			continue
		}
		if !s.Acquire() {
			if l.closed.Load() {
				return 0, ErrClosed
			}
			continue // dropped meanwhile: its records lie below First now
		}
		x := s.TimeIndex()
		i := x.Times.FirstAtOrAfter(x.N, ms)
		if i > 0 {
			_, rel := x.Times.Entry(i - 1)
			answer = s.Base() + uint64(rel) + 1
		}
		s.Release()
		if x.N > 0 && i < x.N {
			break
		}
	}
	// An answer from a segment dropped meanwhile lies below First now; one
	// from the index of a segment a Truncate is cutting, past Next.
	return min(max(answer, l.First()), l.Next()), nil
}

// InQueue reports whether the record's `queue` attribute (key 7) names
// queue id and offset off: a Store's queue checks each record it reads
// with it, without parsing the whole attributes section.
func (r Record) InQueue(id uint32, off uint64) bool {
	return r.section != nil && record.SectionNamesQueue(r.section, id, off)
}

// ForQueue is InQueue for a Store's queue that hands the record on: it
// reports whether the record's `queue` attribute names queue id and
// offset off, and when it does it makes r the record as the queue's own
// log would hold it: offset off, and no attributes section when the
// queue attribute is the only entry there, so that Attrs then parses
// nothing (the queue reads the attributes of every record it hands out).
func (r *Record) ForQueue(id uint32, off uint64) bool {
	if r.section == nil {
		return false
	}
	names, only := record.SectionQueue(r.section, id, off)
	if !names {
		return false
	}
	if only {
		r.section = nil
	}
	r.Offset = off
	return true
}

// ReadNext returns the record at offset, waiting for it if it is not
// appended yet (until ctx ends), and the offset to read next: what a
// reader that never stops calls in a loop (a Cursor does, and keeps the
// offset in a file). The record's Body is valid until it is released.
//
// Some offsets hold no record to return, and ReadNext says so once, with
// an error, and the offset after them as next:
//
//   - offsets below the log's first record: those it dropped from its
//     front before they were read (retention, DropBefore), and those
//     below the offset it began at (Options.FirstOffset), which it never
//     held: an error matching ErrNotFound (ErrTrimmed) that names the
//     range and says how many records were lost; next is the first record
//     still there (on a log opened read-only, whose writer dropped a
//     segment while it was read: the offset after that segment);
//   - a damaged record: an error matching ErrCorrupt; next is the offset
//     after it, or after a whole range of offsets that no file holds;
//   - an offset past the end of a log that was cut below it (Truncate):
//     an error matching ErrNotFound; next is the new end.
//
// When ctx ends or the log is closed, the error is ctx's or ErrClosed and
// next is offset.
func (l *Log) ReadNext(ctx context.Context, offset uint64) (Record, uint64, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var dropped *droppedError
	for tries := 0; ; tries++ {
		rec, err := l.Read(offset)
		switch {
		case err == nil:
			return rec, offset + 1, nil
		case errors.Is(err, ErrClosed):
			return Record{}, offset, ErrClosed
		case errors.As(err, &dropped):
			// A read-only log whose writer dropped the segment meanwhile:
			// its list of segments may still hold it (First with it).
			return Record{Offset: offset}, dropped.next, err
		case errors.Is(err, ErrNotFound): // ErrTrimmed too
			next := l.Next() // first: a follower looks for the writer's changes
			first := l.First()
			switch {
			case offset < first:
				return Record{Offset: offset}, first, l.belowFirst(offset, first)
			case offset > next:
				return Record{Offset: offset}, next, fmt.Errorf("%w: the log was cut at %d, below offset %d: going on at %d",
					ErrNotFound, next, offset, next)
			case offset == next:
				if err := l.Wait(ctx, offset); err != nil {
					return Record{}, offset, err
				}
				continue
			}
			// Inside [first, next) now: the log dropped, rolled or was cut
			// between the read and the look. Look again, not in a tight
			// loop if it does not settle, and not past ctx.
			if err := backOff(ctx, tries); err != nil {
				return Record{}, offset, err
			}
		case errors.Is(err, ErrCorrupt):
			return Record{Offset: offset}, l.pastDamage(offset), err
		default:
			return Record{}, offset, err
		}
	}
}

// belowFirst is ReadNext's error for offsets [offset, first) below the
// log's first record first: how many records the log dropped from that
// range, not counting those below the offset it began at, which it never
// held.
func (l *Log) belowFirst(offset, first uint64) error {
	began := min(l.meta.FirstOffset, first)
	if offset >= began {
		return fmt.Errorf("%w: offsets [%d, %d) were dropped before they were read: %d records lost",
			ErrTrimmed, offset, first, first-offset)
	}
	return fmt.Errorf("%w: offsets [%d, %d) lie below the log's first offset %d (it began at %d): %d records lost",
		ErrTrimmed, offset, first, first, began, first-began)
}

// pastDamage returns where a reader goes on after a damaged record at
// offset: the record after it, or the end of a range of offsets no file
// holds.
func (l *Log) pastDamage(offset uint64) uint64 {
	s, err := l.acquire(offset)
	if err != nil {
		return offset + 1
	}
	defer s.Release()
	if from, to := s.Missing(); offset >= from && offset < to {
		return to
	}
	return offset + 1
}
