package queue

import (
	"errors"
	"fmt"

	"github.com/pagelog/pagelog/engine"
)

// sideLoss is what one of the queue's side logs (the delete log, the
// receive-count log) lost: a report per damaged record or missing range,
// and how many records they cover. One report may cover many records: a
// segment file removed from the middle of the log is one report for all
// the records it held. Each lost delete record may bring back one deleted
// message, each lost receive-count record may cost its message one more
// hand-out.
type sideLoss struct {
	reports []string
	records uint64

	open bool   // the last report's range is not closed yet
	at   uint64 // the last report's offset
}

// walk notes one item of a walk of the log (Records) at off: a good
// record (err nil), a range dropped from the front (ErrTrimmed: not
// damage), or damage, reported. A report covers the records from its
// offset up to the next item's.
func (s *sideLoss) walk(off uint64, err error) {
	if s.open {
		s.records += off - min(off, s.at)
		s.open = false
	}
	if err == nil || errors.Is(err, engine.ErrTrimmed) {
		return
	}
	s.reports = append(s.reports, err.Error())
	s.open, s.at = true, off
}

// end closes the walk at next, the log's end.
func (s *sideLoss) end(next uint64) { s.walk(next, nil) }

// check reports the records that queue.head says the log named what
// holds and that it does not hold: those from span.from below its first
// offset (its oldest segments are gone: the checkpoint dropped none of
// them), and those from its end below span.durable (synced, then lost).
// Records missing in between are reported by the walk. Without a span
// (an older queue.head), there is nothing to check.
func (s *sideLoss) check(what string, first, next uint64, span sideSpan, known bool) {
	if !known {
		return
	}
	if first > span.from {
		s.missing(fmt.Sprintf("%s: records [%d, %d) missing: queue.head says the log holds every record from %d on, its oldest segment starts at %d",
			what, span.from, first, span.from, first), first-span.from)
	}
	if lo := max(next, span.from); span.durable > lo {
		s.missing(fmt.Sprintf("%s: records [%d, %d) missing: queue.head says they were synced, the log ends at %d",
			what, lo, span.durable, next), span.durable-lo)
	}
}

func (s *sideLoss) missing(report string, n uint64) {
	s.reports = append(s.reports, report)
	s.records += n
}
