package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/pagelog/pagelog/internal/segment"
)

// RecordInfo describes where one record lies and whether it verifies; it is
// what `pagelog dump` prints.
type RecordInfo struct {
	Offset   uint64
	Segment  string // file name of the segment
	Position int64  // byte position in the segment; -1 when the record was not found
	Size     int64  // whole record bytes, as its length field says; -1 when unknown
	Checksum uint32 // as stored (0 when unknown)
	OK       bool   // checksum and id verified
	Err      error  // why not OK

	// Missing, when not 0, makes this info stand for a range: the Missing
	// offsets from Offset on, which no segment file holds (the segment
	// named ends before them, and the next one starts after them).
	Missing uint64
}

// Inspect iterates over the records from offset from, good or damaged, with
// their place on disk. Damaged records are reported and skipped over; a
// range of offsets no segment holds is reported once, as one RecordInfo
// with Missing set.
func (l *Log) Inspect(from uint64) iter.Seq[RecordInfo] {
	return func(yield func(RecordInfo) bool) {
		for tries := 0; from < l.next.Load(); {
			from = max(from, l.First())
			s, err := l.acquire(from)
			if errors.Is(err, ErrNotFound) {
				continue // dropped meanwhile
			}
			if err != nil {
				return
			}
			next, more := inspectSegment(s, from, l.readOnly, yield)
			s.Release()
			if !more {
				return
			}
			if next == from {
				// Nothing read: the segment left the log under the walk
				// (dropped by this log, or a log opened read-only whose
				// writer cut it, renaming a copy over its file). The log
				// finds the change when it looks at its files again.
				l.refresh()
				_ = backOff(context.Background(), tries)
				tries++
				continue
			}
			from, tries = next, 0
		}
	}
}

// inspectSegment yields the segment's records from offset from on. For a
// log opened read-only (readOnly), a segment whose file left the log under
// it is reported as one range, and the walk goes on past it (its list of
// segments still holds it).
func inspectSegment(s *segment.Segment, from uint64, readOnly bool, yield func(RecordInfo) bool) (uint64, bool) {
	name := segment.Name(s.Base(), segment.LogSuffix)
	mf, mt := s.Missing()
	sc := s.Scan(from)
	for off := from; ; off++ {
		if off >= mf && off < mt {
			_, _, err := s.Read(off)
			ri := RecordInfo{Offset: off, Segment: name, Position: -1, Size: -1, Err: err, Missing: mt - off}
			return mt, yield(ri)
		}
		v, pos, err := sc.Next()
		if errors.Is(err, segment.ErrNotFound) {
			if readOnly && off < s.Next() && s.Removed() {
				// Not the segment's end: its file left the log after it
				// was opened (dropped by the writer of a log opened
				// read-only, whose list still holds it). Reported as a
				// range, and the walk goes on past it.
				ri := RecordInfo{Offset: off, Segment: name, Position: -1, Size: -1, Err: err, Missing: s.Next() - off}
				return s.Next(), yield(ri)
			}
			return off, true
		}
		in := s.Info(off, v, pos, err)
		ri := RecordInfo{Offset: off, Segment: name, Position: in.Position, Size: in.Size,
			Checksum: in.Checksum, OK: err == nil, Err: err}
		if !yield(ri) {
			return off, false
		}
	}
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	Segments      int
	Records       uint64      // records that verified
	Bytes         int64       // bytes of the segments checked
	Damaged       uint64      // records that did not verify (missing ones not included)
	FirstDamage   *RecordInfo // the first damaged or missing record, nil when none
	Missing       uint64      // offsets no segment file holds
	Problems      []string    // what is wrong beyond single records: missing ranges, misnamed segments, leftover files
	IndexProblems []string    // disagreements between indexes and the log, bytes that are not records
	Recovery      Recovery    // what Open found
}

// Healthy reports whether Verify found nothing wrong.
func (r VerifyReport) Healthy() bool {
	return r.Damaged == 0 && r.Missing == 0 && len(r.Problems) == 0 && len(r.IndexProblems) == 0
}

// Verify checks every record (checksum and id, so id continuity too) and
// both indexes of every segment against the records, and reports ranges of
// offsets that no segment holds and files that do not belong. progress,
// when not nil, is called after each segment with the bytes checked so far
// and in all.
func (l *Log) Verify(progress func(done, total int64)) (VerifyReport, error) {
	if l.closed.Load() {
		return VerifyReport{}, ErrClosed
	}
	segs := *l.segs.Load()
	rep := VerifyReport{Segments: len(segs), Recovery: l.recovery}
	for _, name := range l.recovery.Leftovers {
		rep.Problems = append(rep.Problems, name+": an index file without its segment (a writable open removes it)")
	}
	var total int64
	for _, s := range segs {
		total += s.End()
	}
	for _, s := range segs {
		if !s.Acquire() {
			if l.closed.Load() {
				return rep, ErrClosed
			}
			continue // dropped meanwhile
		}
		// A segment the writer drops while a read-only log verifies it
		// may be reused at once (Options.RecycleSegments), its bytes made
		// zero under the mapping: damage in a file whose name is gone is
		// the drop's, not the disk's. So are records missing from it:
		// zeros read first make its records end at its base, short of
		// the next segment's. (A copy a cut renamed over the name keeps
		// the records below the cut: its damage is reported.)
		before := rep
		inspectSegment(s, s.Base(), l.readOnly, func(ri RecordInfo) bool {
			switch {
			case ri.OK:
				rep.Records++
				return true
			case ri.Missing > 0:
				rep.Missing += ri.Missing
				if s.Misnamed() == "" {
					rep.Problems = append(rep.Problems, fmt.Sprintf("offsets [%d, %d) missing: segment %s ends at offset %d and the next segment starts at %d (a segment file removed?)",
						ri.Offset, ri.Offset+ri.Missing, ri.Segment, ri.Offset, ri.Offset+ri.Missing))
				}
			default:
				rep.Damaged++
			}
			if rep.FirstDamage == nil {
				first := ri
				rep.FirstDamage = &first
			}
			return true
		})
		why := s.Misnamed()
		if l.readOnly && (why != "" || rep.Damaged > before.Damaged || rep.Missing > before.Missing) && s.Removed() {
			rep = before
			s.Release()
			continue // dropped meanwhile
		}
		if why != "" {
			rep.Problems = append(rep.Problems, why)
		}
		rep.IndexProblems = append(rep.IndexProblems, s.VerifyIndex()...)
		rep.Bytes += s.End()
		s.Release()
		if progress != nil {
			progress(rep.Bytes, total)
		}
	}
	return rep, nil
}
