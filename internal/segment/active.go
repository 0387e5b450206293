package segment

import (
	"errors"
	"fmt"
	"time"

	"github.com/pagelog/pagelog/internal/record"
)

// Hint is what the engine knows about the active segment from small
// checkpoint files: a clean-close marker, and a recovery point (how much of
// the segment a sync is known to have covered).
type Hint struct {
	Clean         *CleanState // from the clean-close marker; nil when none
	RecoveryPoint int64       // bytes known synced; 0 when unknown
}

// CleanState is the writer's state at a clean close: enough to open again
// without walking.
type CleanState struct {
	LastPos     int64  // position of the last record (-1: the segment is empty)
	End         int64  // bytes of records
	Next        uint64 // offset after the last record
	SpacerCount int    // bytes since the last index entry
	LastMs      int64  // time of the newest time-index entry
}

// CleanState returns the writer's state for a clean-close marker.
func (s *Segment) CleanState() CleanState {
	w := s.w
	return CleanState{LastPos: w.lastPos, End: w.pos, Next: w.next, SpacerCount: w.spacer.Count, LastMs: w.lastMs}
}

// trustClean checks a clean-close marker against the files: the last record
// verifies and ends at the marked end, nothing follows it, and the index's
// last entry verifies and lies before it. It returns why not, or "".
func (s *Segment) trustClean(c *CleanState, n int) string {
	w := s.w
	switch {
	case c.End < 0 || c.End > w.capacity || c.Next < s.base:
		return "marker out of range"
	case c.End < w.capacity && c.End+4 <= w.capacity && !allZero(s.ro[c.End:min(c.End+record.HeaderSize, w.capacity)]):
		return "bytes follow the marked end"
	case c.LastPos < 0:
		if c.End != 0 || c.Next != s.base || n != 0 {
			return "marker says empty, the segment is not"
		}
		return ""
	}
	v, err := record.Decode(s.ro[c.LastPos:c.End], s.cfg.MaxLength)
	switch {
	case err != nil:
		return "last record: " + err.Error()
	case v.ID != c.Next-1 || c.LastPos+int64(v.Size) != c.End:
		return "last record does not match the marker"
	}
	if n > 0 {
		if _, pos := s.idx.Load().off.Entry(n - 1); int64(pos) > c.LastPos {
			return "index entry past the last record"
		}
	}
	return ""
}

// recoverActive finds the end of an active segment opened for writing.
//
// With a clean-close marker that checks out it walks nothing. Otherwise it
// walks from the last trusted index entry at or before the recovery point:
// a record that fails below the recovery point is damage (reported, stepped
// over, never cut); the first one that fails at or after it is a torn tail,
// cut there. Index entries the walk confirms are kept, missing ones written
// with the time of recovery, and everything past the end is zeroed so that
// no stale bytes can ever pass for a later record.
func (s *Segment) recoverActive(h Hint) (Recovery, error) {
	start := time.Now()
	w := s.w
	rep := Recovery{Segment: Name(s.base, LogSuffix), RecoveryPoint: h.RecoveryPoint}
	x := s.idx.Load()
	valid := x.off.Valid(w.capacity)
	n := s.trustedEntries(x, s.ro)
	if err := s.checkFirstID(s.ro); err != nil {
		return rep, err
	}
	if h.Clean != nil {
		if why := s.trustClean(h.Clean, n); why == "" {
			c := h.Clean
			x.n.Store(int64(n))
			w.pos, w.next, w.lastPos = c.End, c.Next, c.LastPos
			w.spacer.Count, w.lastMs = c.SpacerCount, c.LastMs
			s.end.Store(c.End)
			s.next.Store(c.Next)
			rep.Clean, rep.End, rep.Next = true, c.End, c.Next
			// Nothing past the end may ever pass for a later record, even
			// bytes put there behind the marker's back.
			if err := s.zeroTail(c.End); err != nil {
				return rep, err
			}
			rep.Took = time.Since(start)
			return rep, nil
		} else {
			rep.CleanMismatch = why
		}
	}
	for n > 0 {
		if _, pos := x.off.Entry(n - 1); h.RecoveryPoint == 0 || int64(pos) <= h.RecoveryPoint {
			break
		}
		n--
	}
	rep.EntriesDropped = valid - n
	s.walkActive(x, n, h.RecoveryPoint, &rep)
	rep.IndexRepaired = rep.EntriesAdded > 0 || rep.EntriesDropped > 0
	if rep.Cut {
		rep.TornBytes = lastNonZero(s.ro[w.pos:w.capacity])
	}
	if err := s.zeroTail(w.pos); err != nil {
		return rep, err
	}
	rep.ZeroedBytes = w.capacity - w.pos
	rep.Took = time.Since(start)
	return rep, nil
}

// walkActive walks the active segment from index entry n-1 (or the start)
// and sets the writer's state to the end it finds.
func (s *Segment) walkActive(x *index, n int, rp int64, rep *Recovery) {
	w := s.w
	pos, id := int64(0), s.base
	if n > 0 {
		rel, p := x.off.Entry(n - 1)
		pos, id = int64(p), s.base+uint64(rel)
		w.lastMs, _ = x.tim.Entry(n - 1)
	}
	k := n // next entry to confirm or write
	entry := func(id uint64, p int64) {
		rel := uint32(id - s.base)
		if k < x.off.Cap() {
			if r, ep := x.off.Entry(k); r == rel && int64(ep) == p {
				if ms, tr := x.tim.Entry(k); tr == rel && ms >= w.lastMs {
					w.lastMs = ms
					k++
					x.n.Store(int64(k))
					return
				}
			}
		}
		x.n.Store(int64(k))
		s.addEntry(x, id, p)
		k = x.entries()
		rep.EntriesAdded++
	}
	x.n.Store(int64(n))
	from := pos
	w.lastPos = -1
	for {
		r := s.walk(s.ro, pos, id, w.capacity, &w.spacer, entry)
		rep.Records += r.count
		if r.count > 0 {
			w.lastPos = r.last
		}
		pos, id = r.pos, r.next
		if r.stop == nil {
			break
		}
		if errors.Is(r.stop, record.ErrEnd) && (rp == 0 || pos >= rp) {
			if s.tornAfterEnd(s.ro[:w.capacity], pos) {
				rep.Cut, rep.CutReason = true, fmt.Sprintf("at position %d: a zero length field followed by the bytes of a record never finished", pos)
			}
			break
		}
		if pos >= rp || rp == 0 {
			rep.Cut, rep.CutReason = true, fmt.Sprintf("at position %d: %v", pos, r.stop)
			break
		}
		// Below the recovery point: damage. Report it and step over it.
		rep.Damaged = append(rep.Damaged, Damage{Offset: id, Position: pos, Reason: r.stop.Error()})
		np, nid := s.resyncForward(pos, id, min(w.capacity, rp+int64(s.cfg.MaxRecord)))
		if np < 0 {
			rep.Cut, rep.CutReason = true, fmt.Sprintf("at position %d: %v, and no good record follows", pos, r.stop)
			break
		}
		pos, id = np, nid
		w.spacer.Count = 0
	}
	rep.Walked = pos - from
	w.pos, w.next = pos, id
	x.n.Store(int64(k))
	s.clearEntries(x, k)
	s.end.Store(pos)
	s.next.Store(id)
	rep.End, rep.Next = pos, id
}

// resyncForward finds the first record after pos, below limit, that
// verifies and whose id is plausible (at least id, and no more records
// ahead than the bytes allow). It returns -1 when there is none.
func (s *Segment) resyncForward(pos int64, id uint64, limit int64) (int64, uint64) {
	maxID := id + uint64(limit-pos)/record.HeaderSize + 1
	for p := pos + 1; p+record.HeaderSize <= limit; p++ {
		_, _, _, got, _ := record.Header(s.ro[p:])
		if got < id || got > maxID {
			continue
		}
		if v, err := record.Decode(s.ro[p:], s.cfg.MaxLength); err == nil && v.ID == got {
			return p, got
		}
	}
	return -1, id
}

// lastNonZero returns the length of b up to and including its last non-zero
// byte (0 when b is all zeros). It reads b a page at a time from the front,
// so it only runs when a torn tail was cut.
func lastNonZero(b []byte) int64 {
	last := -1
	const step = 4096
	for i := 0; i < len(b); i += step {
		chunk := b[i:min(i+step, len(b))]
		if allZero(chunk) {
			continue
		}
		for j := len(chunk) - 1; j >= 0; j-- {
			if chunk[j] != 0 {
				last = i + j
				break
			}
		}
	}
	return int64(last + 1)
}
