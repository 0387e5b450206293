package segment

import (
	"errors"
	"fmt"
	"os"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/sparseidx"
)

// Info describes one record's place in a segment, for tools.
type Info struct {
	Offset   uint64
	Position int64
	Size     int64  // whole record bytes as its length field says
	Checksum uint32 // as stored
	Err      error  // nil when the record verified
}

// Info returns the place of the record a Scanner returned, good or not.
func (s *Segment) Info(offset uint64, v record.View, pos int64, err error) Info {
	if err == nil {
		return Info{Offset: offset, Position: pos, Size: int64(v.Size), Checksum: v.Checksum}
	}
	in := Info{Offset: offset, Position: pos, Err: err}
	if end := s.end.Load(); pos >= 0 && pos < end {
		length, _, sum, _, ok := record.Header(s.ro[pos:end])
		if ok {
			in.Size, in.Checksum = int64(length)+4, sum
		}
	}
	return in
}

// VerifyIndex compares the segment's index files on disk with the entries
// its records call for under the sparse rule, and reports every
// disagreement in a sentence. A sealed segment's files must hold exactly
// those entries; an active one's may hold zeros (or newer entries) after
// them. It also reports bytes after a sealed segment's last record.
func (s *Segment) VerifyIndex() []string {
	var problems []string
	end := s.end.Load()
	buf := s.ro[:end]
	var want []entry
	sp := sparseidx.Spacer{Interval: s.cfg.IndexInterval}
	add := func(id uint64, pos int64) { want = append(want, entry{uint32(id - s.base), uint32(pos)}) }
	pos, id := int64(0), s.base
	for pos < end {
		r := s.walk(buf, pos, id, end, &sp, add)
		if r.stop == nil || errors.Is(r.stop, record.ErrEnd) {
			pos = r.pos
			break
		}
		pos, id = s.skipDamage(buf, r.pos, r.next)
	}
	sealed := s.w == nil && !s.activeView
	if sealed && pos < end && !allZero(buf[pos:]) {
		problems = append(problems, fmt.Sprintf("%s: %d bytes after the last record that are not a record",
			Name(s.base, LogSuffix), end-pos))
	}
	problems = append(problems, s.compareOffsets(want, sealed)...)
	problems = append(problems, s.compareTimes(want, sealed)...)
	return problems
}

type entry struct{ rel, pos uint32 }

func (s *Segment) compareOffsets(want []entry, sealed bool) []string {
	name := Name(s.base, IndexSuffix)
	data, err := os.ReadFile(s.path(IndexSuffix))
	if err != nil {
		if len(want) == 0 && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	x := sparseidx.Offsets{Buf: data}
	var out []string
	if sealed && len(data) != len(want)*sparseidx.OffsetEntrySize {
		out = append(out, fmt.Sprintf("%s: %d bytes, the log calls for %d entries (%d bytes)",
			name, len(data), len(want), len(want)*sparseidx.OffsetEntrySize))
	}
	if x.Cap() < len(want) {
		return append(out, fmt.Sprintf("%s: %d entries, the log calls for %d", name, x.Cap(), len(want)))
	}
	for i, e := range want {
		if rel, pos := x.Entry(i); rel != e.rel || pos != e.pos {
			return append(out, fmt.Sprintf("%s: entry %d is (%d, %d), the log calls for (%d, %d)",
				name, i, rel, pos, e.rel, e.pos))
		}
	}
	return out
}

func (s *Segment) compareTimes(want []entry, sealed bool) []string {
	name := Name(s.base, TimeIndexSuffix)
	data, err := os.ReadFile(s.path(TimeIndexSuffix))
	if err != nil {
		if len(want) == 0 && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	x := sparseidx.Times{Buf: data}
	var out []string
	if sealed && len(data) != len(want)*sparseidx.TimeEntrySize {
		out = append(out, fmt.Sprintf("%s: %d bytes, the log calls for %d entries (%d bytes)",
			name, len(data), len(want), len(want)*sparseidx.TimeEntrySize))
	}
	if x.Cap() < len(want) {
		return append(out, fmt.Sprintf("%s: %d entries, the log calls for %d", name, x.Cap(), len(want)))
	}
	var last int64
	for i, e := range want {
		ms, rel := x.Entry(i)
		if rel != e.rel {
			return append(out, fmt.Sprintf("%s: entry %d has relative offset %d, the log calls for %d", name, i, rel, e.rel))
		}
		if ms < last {
			return append(out, fmt.Sprintf("%s: entry %d goes back in time (%d < %d)", name, i, ms, last))
		}
		last = ms
	}
	return out
}
