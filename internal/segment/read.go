package segment

import (
	"bytes"
	"encoding/binary"
	"errors"

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
	end := s.end.Load()
	x := s.lookupIndex()
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
		v, at, err := s.verify(offset, pos, end)
		if err == nil {
			return v, at, nil
		}
		if v, at, rerr := s.resync(offset, x, i, n, end); rerr == nil {
			return v, at, nil
		}
		return v, at, err
	}
	return s.resync(offset, x, i, n, end)
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

// resync looks for the record offset when the walk towards it met damage
// (a damaged length, or an index entry that points into a record): it
// searches for its 8 id bytes between the index entries around it and
// accepts the first candidate that verifies. Only damaged segments pay for
// this.
func (s *Segment) resync(offset uint64, x *index, i, n int, end int64) (record.View, int64, error) {
	from, to := int64(0), end
	if i > 0 {
		_, p := x.off.Entry(i - 1)
		from = int64(p)
	}
	if i+1 < n {
		_, p := x.off.Entry(i + 1)
		to = min(end, int64(p)+record.HeaderSize)
	}
	var want [8]byte
	binary.BigEndian.PutUint64(want[:], offset)
	for p := from + 8; p+8 <= to; {
		k := bytes.Index(s.ro[p:to], want[:])
		if k < 0 {
			break
		}
		at := p + int64(k) - 8
		if v, _, err := s.verify(offset, at, end); err == nil {
			return v, at, nil
		}
		p += int64(k) + 1
	}
	if from > 0 || to < end {
		// The index around it may be wrong too: search the whole segment.
		return s.resync(offset, x, 0, 0, end)
	}
	return record.View{}, from, s.corrupt(offset, from, "damaged record on the way to it, and no intact copy of it follows")
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

// TimeView is a segment's time index as readers see it.
type TimeView struct {
	Times sparseidx.Times
	N     int
}

// TimeIndex returns the segment's time index (checked first if needed).
func (s *Segment) TimeIndex() TimeView {
	x := s.lookupIndex()
	return TimeView{Times: x.tim, N: x.entries()}
}
