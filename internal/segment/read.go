package segment

import (
	"errors"
	"fmt"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/sparseidx"
)

// Read finds the record with id offset and verifies it: its checksum and its
// id. The returned view's slices point into the read-only mapping; the
// caller must hold a reference (Acquire) for as long as it uses them.
//
// The lookup follows FORMAT.md: the greatest index entry at or below the
// offset, then a walk forward by record lengths. A damaged record on the way
// does not hide the ones after it: the walk resynchronizes by searching for
// the wanted id.
func (s *Segment) Read(offset uint64) (record.View, int64, error) {
	if offset < s.base || offset >= s.next.Load() {
		return record.View{}, 0, ErrNotFound
	}
	if err := s.readable(); err != nil {
		return record.View{}, -1, err
	}
	x := s.lookupIndex()
	if (s.activeView || s.sealed.Load()) && offset >= s.recEnd.Load() {
		return record.View{}, -1, s.missing(offset)
	}
	end := s.end.Load()
	n := x.entries()
	i, rel, p, ok := x.off.Floor(n, uint32(offset-s.base))
	pos, id := int64(0), s.base
	if ok {
		pos, id = int64(p), s.base+uint64(rel)
		if !s.holds(pos, end, id) {
			// The index entry points at something else: rebuild the
			// index before the next lookup (sealed segments).
			s.distrust.Store(true)
		}
	}
	for id < offset {
		size, ok := s.skip(pos, end, id)
		if !ok {
			break
		}
		pos += size
		id++
	}
	if id == offset {
		if v, at, err := s.verify(offset, pos, end); err == nil {
			return v, at, nil
		}
	}
	return s.seek(offset, x, i, end)
}

// seek is the slow path of Read, for a segment with damage between an
// index entry and the record asked for: it walks from the greatest entry at
// or below offset that points at a record that verifies (or from the
// start), verifying every record and stepping over damage the way the walk
// at open does (the next record that verifies with the expected id or a
// later one), so that a read finds a record exactly where the open's walk
// did.
func (s *Segment) seek(offset uint64, x *index, i int, end int64) (record.View, int64, error) {
	src := mapSource(s.ro[:end])
	pos, id := int64(0), s.base
	for ; i >= 0; i-- {
		rel, p := x.off.Entry(i)
		if s.entryAt(src, int64(p), s.base+uint64(rel)) {
			pos, id = int64(p), s.base+uint64(rel)
			break
		}
	}
	next := s.next.Load()
	for {
		v, err := s.decodeAt(src, pos)
		if err == nil && v.ID == id {
			if id == offset {
				return v, pos, nil
			}
			pos += int64(v.Size)
			id++
			continue
		}
		if id == offset {
			why := "record holds another id"
			switch {
			case errors.Is(err, record.ErrEnd):
				why = "zero length where a record must be"
			case err != nil:
				why = err.Error()
			}
			if np, nid := s.resume(src, pos, id, next); np >= 0 && nid == offset {
				pos, id = np, nid
				continue
			}
			return record.View{}, pos, s.corrupt(offset, pos, why)
		}
		np, nid := s.resume(src, pos, id, next)
		if np < 0 || nid > offset {
			return record.View{}, -1, s.corrupt(offset, -1, "damaged: no record with this offset lies between the records around it")
		}
		pos, id = np, nid
	}
}

// skip reads the header at pos and returns the record's size when the header
// is plausible and holds the expected id. It does not verify the checksum:
// only the record asked for is verified.
func (s *Segment) skip(pos, end int64, id uint64) (int64, bool) {
	if pos < 0 || pos+record.HeaderSize > end {
		return 0, false
	}
	length, _, _, got, _ := record.Header(s.ro[pos:end])
	size := int64(length) + 4
	if got != id || length < record.MinLength || length > s.cfg.MaxLength || pos+size > end {
		return 0, false
	}
	return size, true
}

// verify decodes the record at pos and checks that it is offset.
func (s *Segment) verify(offset uint64, pos, end int64) (record.View, int64, error) {
	if pos < 0 || pos >= end {
		return record.View{}, pos, s.corrupt(offset, pos, "record lies past the end of the segment")
	}
	v, err := record.Decode(s.ro[pos:end], s.cfg.MaxLength)
	if err != nil {
		if errors.Is(err, record.ErrEnd) {
			return record.View{}, pos, s.corrupt(offset, pos, "zero length where a record must be")
		}
		return record.View{}, pos, s.corrupt(offset, pos, err.Error())
	}
	if v.ID != offset {
		return record.View{}, pos, s.corrupt(offset, pos, "record holds another id")
	}
	return v, pos, nil
}

// missing builds the error for an offset of the segment's range that its
// file does not hold.
func (s *Segment) missing(offset uint64) error {
	if s.misnamedWhy != "" {
		return fmt.Errorf("%w: offset %d: %s", ErrCorrupt, offset, s.misnamedWhy)
	}
	return fmt.Errorf("%w: offset %d missing: segment %s ends at offset %d and the next segment starts at %d (a segment file removed?)",
		ErrCorrupt, offset, Name(s.base, LogSuffix), s.recEnd.Load(), s.next.Load())
}

// Missing returns the range of offsets [from, to) of the segment's range
// that its file does not hold (from == to when none), checking the index
// first if needed.
func (s *Segment) Missing() (from, to uint64) {
	if !s.activeView && !s.sealed.Load() {
		return noNext, noNext // the active segment holds all it published
	}
	if unpin, ok := s.pin(); ok {
		s.lookupIndex()
		unpin()
	}
	return min(s.recEnd.Load(), s.next.Load()), s.next.Load()
}

// holds reports whether the header at pos carries id.
func (s *Segment) holds(pos, end int64, id uint64) bool {
	if pos < 0 || pos+record.HeaderSize > end {
		return false
	}
	_, _, _, got, _ := record.Header(s.ro[pos:end])
	return got == id
}

// Scanner walks the records of a segment in order from a starting offset,
// verifying each. It is not safe for concurrent use; the caller holds a
// reference on the segment while it scans.
type Scanner struct {
	s    *Segment
	pos  int64
	next uint64
}

// Scan returns a Scanner positioned at offset.
func (s *Segment) Scan(offset uint64) Scanner {
	return Scanner{s: s, pos: -1, next: offset}
}

// Next returns the next record, its position, and an error. At the end of
// the segment's published records it returns ErrNotFound. A damaged record
// is returned as an error that wraps ErrCorrupt; the scan then goes on with
// the record after it.
func (sc *Scanner) Next() (record.View, int64, error) {
	s := sc.s
	offset := sc.next
	if offset >= s.next.Load() {
		return record.View{}, 0, ErrNotFound
	}
	if err := s.readable(); err != nil {
		sc.next = s.next.Load() // the rest of the segment is unreadable: report it once
		return record.View{}, -1, err
	}
	sc.next++
	end := s.end.Load()
	if sc.pos >= 0 {
		if v, err := record.Decode(s.ro[sc.pos:end], s.cfg.MaxLength); err == nil && v.ID == offset {
			pos := sc.pos
			sc.pos += int64(v.Size)
			return v, pos, nil
		}
	}
	v, pos, err := s.Read(offset)
	if err != nil {
		sc.pos = -1
		return v, pos, err
	}
	sc.pos = pos + int64(v.Size)
	return v, pos, nil
}

// SkipPlain steps over the next record when its header shows a record
// without an attributes section: the id expected, a plausible length, and
// the whole record inside the published bytes. Its checksum is not
// computed. It reports false, and moves nothing, when the scan's position
// is not known (its start, after damage) or the header shows anything
// else: Next then reads and verifies the record.
func (sc *Scanner) SkipPlain() bool {
	s := sc.s
	if sc.pos < 0 || sc.next >= s.next.Load() || s.readable() != nil {
		return false
	}
	end := s.end.Load()
	if sc.pos+record.HeaderSize > end {
		return false
	}
	length, attrs, _, id, _ := record.Header(s.ro[sc.pos:end])
	size := int64(length) + 4
	if attrs || id != sc.next || length < record.MinLength || length > s.cfg.MaxLength || sc.pos+size > end {
		return false
	}
	sc.pos += size
	sc.next++
	return true
}

// TimeView is a segment's time index as readers see it.
type TimeView struct {
	Times sparseidx.Times
	N     int
}

// lastEntry returns the count of entries and the time of the last one.
func (v TimeView) lastEntry() (n int, ms int64) {
	if v.N > 0 {
		ms, _ = v.Times.Entry(v.N - 1)
	}
	return v.N, ms
}

// TimeIndex returns the segment's time index (checked first if needed).
// The caller holds a reference (Acquire). For a sealed segment it also
// keeps what the index says of its end, for TimeEnd.
func (s *Segment) TimeIndex() TimeView {
	gen := s.indexGen.Load()
	x := s.lookupIndex()
	v := TimeView{Times: x.tim, N: x.entries()}
	if s.sealed.Load() && s.checked.Load() && !s.distrust.Load() && (!s.lazy.Load() || s.isMapped.Load()) {
		e := &timeEnd{gen: gen, n: v.N}
		if v.N > 0 {
			e.lastMs, e.lastRel = x.tim.Entry(v.N - 1)
		}
		s.timeEnd.Store(e)
	}
	return v
}

// timeEnd is the end of a sealed segment's time index, as TimeIndex last
// read it, in the index's generation gen (see Segment.indexGen).
type timeEnd struct {
	gen     uint64
	n       int
	lastMs  int64
	lastRel uint32
}

// TimeEnd returns how many entries the segment's time index holds and the
// last of them (its time and its offset relative to the base), when it is
// known without a reference: a sealed segment whose index TimeIndex read
// and has not rebuilt since (an eviction and a new mapping keep the
// entries). ok is
// false when it is not known: Acquire the segment and read TimeIndex. A
// search by time passes over a segment that ends before the time it looks
// for without mapping it.
func (s *Segment) TimeEnd() (n int, lastMs int64, lastRel uint32, ok bool) {
	e := s.timeEnd.Load()
	if e == nil || e.gen != s.indexGen.Load() {
		return 0, 0, 0, false
	}
	return e.n, e.lastMs, e.lastRel, true
}
