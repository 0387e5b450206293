package queue

import "slices"

// skipSet is the set of offsets at or above the cursor known to be deleted
// (by a delete record replayed at open, a Discard ahead of the cursor, or
// a range lost in a power failure), as sorted, disjoint, non-adjacent
// ranges [from, to). The cursor steps over them as it reaches them.
type skipSet struct {
	r []span
}

type span struct{ from, to uint64 }

// add adds [from, to).
func (s *skipSet) add(from, to uint64) {
	if from >= to {
		return
	}
	i, _ := slices.BinarySearchFunc(s.r, from, func(x span, v uint64) int {
		switch {
		case x.to < v:
			return -1
		case x.from > v:
			return 1
		}
		return 0
	})
	// s.r[i] is the first range that ends at or after from: merge with it
	// and every following range that [from, to) reaches.
	j := i
	for j < len(s.r) && s.r[j].from <= to {
		from, to = min(from, s.r[j].from), max(to, s.r[j].to)
		j++
	}
	s.r = slices.Replace(s.r, i, j, span{from, to})
}

// contains reports whether off is in the set.
func (s *skipSet) contains(off uint64) bool {
	i, found := slices.BinarySearchFunc(s.r, off, func(x span, v uint64) int {
		switch {
		case x.to <= v:
			return -1
		case x.from > v:
			return 1
		}
		return 0
	})
	_ = i
	return found
}

// front returns the lowest range, ok false when the set is empty.
func (s *skipSet) front() (span, bool) {
	if len(s.r) == 0 {
		return span{}, false
	}
	return s.r[0], true
}

// trimFront removes the offsets below off.
func (s *skipSet) trimFront(off uint64) {
	for len(s.r) > 0 && s.r[0].to <= off {
		s.r = s.r[1:]
	}
	if len(s.r) > 0 && s.r[0].from < off {
		s.r[0].from = off
	}
	if len(s.r) == 0 {
		s.r = nil // let the backing array go
	}
}

// end returns one past the highest offset in the set (0 when empty).
func (s *skipSet) end() uint64 {
	if len(s.r) == 0 {
		return 0
	}
	return s.r[len(s.r)-1].to
}

// count returns how many offsets the set holds.
func (s *skipSet) count() uint64 {
	var n uint64
	for _, r := range s.r {
		n += r.to - r.from
	}
	return n
}

// trimFrom removes the offsets at or above off.
func (s *skipSet) trimFrom(off uint64) {
	for len(s.r) > 0 && s.r[len(s.r)-1].from >= off {
		s.r = s.r[:len(s.r)-1]
	}
	if n := len(s.r); n > 0 && s.r[n-1].to > off {
		s.r[n-1].to = off
	}
}

// uncovered returns the parts of [from, to) that the set does not hold.
func (s *skipSet) uncovered(from, to uint64) []span {
	var out []span
	for _, r := range s.r {
		if r.to <= from {
			continue
		}
		if r.from >= to {
			break
		}
		if r.from > from {
			out = append(out, span{from, r.from})
		}
		from = max(from, r.to)
	}
	if from < to {
		out = append(out, span{from, to})
	}
	return out
}
