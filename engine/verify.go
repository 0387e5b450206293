package engine

import (
	"errors"
	"iter"

	"github.com/pagelog/pagelog/internal/segment"
)

// RecordInfo describes where one record lies and whether it verifies; it is
// what `pagelog dump` prints.
type RecordInfo struct {
	Offset   uint64
	Segment  string // file name of the segment
	Position int64  // byte position in the segment
	Size     int64  // whole record bytes, as its length field says
	Checksum uint32 // as stored
	OK       bool   // checksum and id verified
	Err      error  // why not OK
}

// Inspect iterates over the records from offset from, good or damaged, with
// their place on disk. Damaged records are reported and skipped over.
func (l *Log) Inspect(from uint64) iter.Seq[RecordInfo] {
	return func(yield func(RecordInfo) bool) {
		from = max(from, l.First())
		for from < l.next.Load() {
			s, err := l.acquire(from)
			if err != nil {
				return
			}
			next, more := inspectSegment(s, from, yield)
			s.Release()
			if !more {
				return
			}
			from = next
		}
	}
}

func inspectSegment(s *segment.Segment, from uint64, yield func(RecordInfo) bool) (uint64, bool) {
	name := segment.Name(s.Base(), segment.LogSuffix)
	sc := s.Scan(from)
	for off := from; ; off++ {
		v, pos, err := sc.Next()
		if errors.Is(err, segment.ErrNotFound) {
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
	Damaged       uint64      // records that did not verify
	FirstDamage   *RecordInfo // the first of them, nil when none
	IndexProblems []string    // disagreements between indexes and the log
	Recovery      Recovery    // what Open found
}

// Healthy reports whether Verify found nothing wrong.
func (r VerifyReport) Healthy() bool { return r.Damaged == 0 && len(r.IndexProblems) == 0 }

// Verify checks every record (checksum and id, so id continuity too) and
// both indexes of every segment against the records. progress, when not
// nil, is called after each segment with the bytes checked so far and in
// all.
func (l *Log) Verify(progress func(done, total int64)) (VerifyReport, error) {
	if l.closed.Load() {
		return VerifyReport{}, ErrClosed
	}
	segs := *l.segs.Load()
	rep := VerifyReport{Segments: len(segs), Recovery: l.recovery}
	var total int64
	for _, s := range segs {
		total += s.End()
	}
	for _, s := range segs {
		if !s.Acquire() {
			return rep, ErrClosed
		}
		inspectSegment(s, s.Base(), func(ri RecordInfo) bool {
			if ri.OK {
				rep.Records++
				return true
			}
			rep.Damaged++
			if rep.FirstDamage == nil {
				first := ri
				rep.FirstDamage = &first
			}
			return true
		})
		rep.IndexProblems = append(rep.IndexProblems, s.VerifyIndex()...)
		rep.Bytes += s.End()
		s.Release()
		if progress != nil {
			progress(rep.Bytes, total)
		}
	}
	return rep, nil
}
