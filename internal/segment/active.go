package segment

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/sparseidx"
)

// Hint is what the engine knows about the active segment from small
// checkpoint files: a clean-close marker, and a recovery point (how much of
// the segment a sync is known to have covered).
type Hint struct {
	Clean         *CleanState // from the clean-close marker; nil when none
	RecoveryPoint int64       // bytes known synced; 0 when unknown
	RecoveryNext  uint64      // the offset after the records below RecoveryPoint
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

// trustClean checks a clean-close marker against the file as src shows it
// (size bytes): the last record verifies and ends at the marked end,
// nothing follows it, and the index's last entry verifies and lies before
// it. It returns why not, or "".
func (s *Segment) trustClean(c *CleanState, src source, size int64, n int) string {
	switch {
	case c.End < 0 || c.End > size || c.Next < s.base || c.LastPos >= c.End:
		return "marker out of range"
	case c.End < size && !allZeroAt(src, c.End, min(record.HeaderSize, size-c.End)):
		return "bytes follow the marked end"
	case c.LastPos < 0:
		if c.End != 0 || c.Next != s.base || n != 0 {
			return "marker says empty, the segment is not"
		}
		return ""
	}
	v, err := s.decodeAt(limitSource{src, c.End}, c.LastPos)
	switch {
	case err != nil:
		return "last record: " + err.Error()
	case v.ID != c.Next-1 || c.LastPos+int64(v.Size) != c.End:
		return "last record does not match the marker"
	}
	// The index must be whole up to the marker: the sparse rule's count
	// since the last trusted entry is what the marker says.
	since := c.End
	if n > 0 {
		_, pos := s.idx.Load().off.Entry(n - 1)
		if int64(pos) > c.LastPos {
			return "index entry past the last record"
		}
		since = c.End - int64(pos)
	}
	if int64(c.SpacerCount) != since {
		return "the index does not reach the marked end"
	}
	return ""
}

// recoverActive finds the end of an active segment opened for writing.
//
// With a clean-close marker that checks out it walks nothing. Otherwise it
// walks from the last trusted index entry at or before the recovery point
// (see findEnd for what is damage and what is a torn tail). Index entries
// the walk confirms are kept, missing ones written with the time of
// recovery, and everything past the end is zeroed so that no stale bytes
// can ever pass for a later record.
func (s *Segment) recoverActive(h Hint) (Recovery, error) {
	start := time.Now()
	w := s.w
	s.rp = h.RecoveryPoint
	rep := Recovery{Segment: Name(s.base, LogSuffix), RecoveryPoint: h.RecoveryPoint}
	// A file shorter than what a checkpoint says was written (cut by hand
	// or by the file system) reads as zeros up to it, as it did when it
	// was allocated whole: the walk then calls the range missing, never a
	// torn tail.
	need := h.RecoveryPoint
	if h.Clean != nil {
		need = max(need, h.Clean.End)
	}
	if need > w.extent() && need <= w.capacity {
		if err := s.growLocked(need); err != nil {
			return rep, err
		}
	}
	src := mapSource(s.ro[:w.extent()])
	if why := s.misnamed(src); why != "" {
		return rep, fmt.Errorf("%w: %s", ErrMisnamed, why)
	}
	x := s.idx.Load()
	valid := x.off.Valid(w.extent())
	n := s.trustedEntries(x, src, w.extent())
	if h.Clean != nil {
		if why := s.trustClean(h.Clean, src, w.extent(), n); why == "" {
			c := h.Clean
			x.n.Store(int64(n))
			s.clearEntries(x, n)
			w.pos, w.next, w.lastPos = c.End, c.Next, c.LastPos
			w.spacer.Count, w.lastMs = c.SpacerCount, c.LastMs
			s.publishEnd(c.End, c.Next)
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
	n = entriesBefore(x, n, h.RecoveryPoint)
	rep.EntriesDropped = valid - n
	s.walkActive(src, x, n, h, &rep)
	rep.IndexRepaired = rep.EntriesAdded > 0 || rep.EntriesDropped > 0
	if rep.Cut {
		rep.TornBytes = lastNonZero(s.ro[w.pos:w.extent()])
	}
	if err := s.zeroTail(w.pos); err != nil {
		return rep, err
	}
	rep.ZeroedBytes = w.extent() - w.pos
	rep.Took = time.Since(start)
	return rep, nil
}

// entriesBefore returns how many of the first n entries of x lie at or
// before the recovery point rp (all n when rp is unknown).
func entriesBefore(x *index, n int, rp int64) int {
	for n > 0 {
		if _, pos := x.off.Entry(n - 1); rp == 0 || int64(pos) <= rp {
			break
		}
		n--
	}
	return n
}

// walkActive walks the active segment from index entry n-1 (or the start)
// and sets the writer's state to the end it finds.
func (s *Segment) walkActive(src source, x *index, n int, h Hint, rep *Recovery) {
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
	e := endSearch{src: src, limit: w.extent(), maxNext: math.MaxUint64, hint: h, sp: &w.spacer, entry: entry}
	end := s.findEnd(&e, pos, id, rep)
	w.pos, w.next, w.lastPos = end.pos, end.next, end.lastPos
	x.n.Store(int64(k))
	s.clearEntries(x, k)
	s.publishEnd(end.pos, end.next)
	rep.End, rep.Next = end.pos, end.next
}

// endSearch is a walk that finds where an active segment's records end:
// the writable open's recovery and a read-only view share it.
type endSearch struct {
	src     source
	limit   int64  // bytes that may hold records
	maxNext uint64 // records stop at this id (a view's successor); MaxUint64 when unknown
	hint    Hint
	sp      *sparseidx.Spacer
	entry   func(id uint64, pos int64)

	// view: another process may be writing the bytes as they are read, so
	// a bad record is read again before it is called damage (it may have
	// been a record half written at the first read).
	view *fileSource
}

// endFound is where a walk found the records to end.
type endFound struct {
	pos     int64
	next    uint64
	lastPos int64  // -1 when the segment holds no record
	missing uint64 // offsets from here to next have no bytes in the file (noNext: none)
}

// findEnd walks from pos (expected id) to the end of the records.
//
// A torn tail is only what may have been in flight when the writer
// stopped: a record that fails its checks, or a zero length field followed
// by bytes, with no whole record after it within one record's reach. A bad
// record followed by a whole record with the expected id (or a later one) is damage: it is
// reported and stepped over, never cut. Below the recovery point nothing is
// ever cut: when damage there has no good record after it, the end is the
// recovery point itself, so that its offsets are never given to new
// records.
func (s *Segment) findEnd(e *endSearch, pos int64, id uint64, rep *Recovery) endFound {
	from := pos
	found := endFound{lastPos: -1, missing: noNext}
	rp, rpNext := e.hint.RecoveryPoint, e.hint.RecoveryNext
	rechecked := int64(-1)
	for {
		r := s.walk(e.src, pos, id, e.limit, e.maxNext, e.sp, e.entry)
		rep.Records += r.count
		if r.count > 0 {
			found.lastPos = r.last
		}
		pos, id = r.pos, r.next
		if r.stop == nil || id >= e.maxNext {
			break
		}
		zero := errors.Is(r.stop, record.ErrEnd)
		below := pos < rp && rpNext > id
		if zero && !below && !s.tornAfterEnd(e.src, pos, e.limit) {
			break // the zero-filled end of the file
		}
		reach := s.reach(pos, e.limit)
		np, nid := s.nextGood(limitSource{e.src, e.limit}, pos, id, reach, s.idBound(id, pos, e.maxNext))
		if np >= 0 && e.view != nil && rechecked != pos {
			// Read it again: a record being appended is whole by the
			// time the one after it is.
			e.view.forget()
			rechecked = pos
			continue
		}
		reason := r.stop.Error()
		if zero {
			reason = "a zero length field followed by the bytes of a record never finished"
		}
		if np < 0 && !below {
			rep.Cut, rep.CutReason = true, fmt.Sprintf("at position %d: %s", pos, reason)
		}
		if np < 0 {
			break
		}
		rep.Damaged = append(rep.Damaged, Damage{Offset: id, Position: pos, Reason: reason})
		e.sp.Count += int(np - pos) // the damaged bytes count as written; they get no entry
		pos, id = np, nid
	}
	if pos < rp && rpNext > id {
		// Below the recovery point every record was whole and synced:
		// nothing there is ever cut, and its offsets are never given to
		// new records. The log goes on at the recovery point; when the
		// file ends before it (a view of a file cut short), the offsets
		// are a missing range.
		if pos < e.limit {
			rep.Damaged = append(rep.Damaged, Damage{Offset: id, Position: pos,
				Reason: fmt.Sprintf("records [%d, %d) below the recovery point %d do not verify", id, rpNext, rp)})
		}
		if rp <= e.limit {
			pos = rp
		} else {
			found.missing = id
		}
		id = rpNext
	}
	rep.Walked = pos - from
	found.pos, found.next = pos, id
	return found
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
