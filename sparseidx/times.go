package sparseidx

import (
	"encoding/binary"
	"io"

	"github.com/pagelog/pagelog/warmsearch"
)

// Times views a time index: Buf holds n entries, where the caller tracks n;
// Buf may be longer, zero-filled beyond the last entry.
type Times struct{ Buf []byte }

// Cap returns how many whole entries fit in Buf: len(Buf)/12. Trailing bytes
// that do not make a whole entry are ignored.
func (x Times) Cap() int { return len(x.Buf) / TimeEntrySize }

// Entry returns entry i. An i outside [0, Cap()) reads as the zero entry.
func (x Times) Entry(i int) (ms int64, rel uint32) {
	if i < 0 || i >= x.Cap() {
		return 0, 0
	}
	e := x.Buf[i*TimeEntrySize : i*TimeEntrySize+TimeEntrySize]
	return int64(binary.BigEndian.Uint64(e[0:8])), binary.BigEndian.Uint32(e[8:12])
}

// Put writes entry i; Buf must be writable. It returns io.ErrShortBuffer,
// writing nothing, when i is outside [0, Cap()).
func (x Times) Put(i int, ms int64, rel uint32) error {
	if i < 0 || i >= x.Cap() {
		return io.ErrShortBuffer
	}
	e := x.Buf[i*TimeEntrySize : i*TimeEntrySize+TimeEntrySize]
	binary.BigEndian.PutUint64(e[0:8], uint64(ms))
	binary.BigEndian.PutUint32(e[8:12], rel)
	return nil
}

// ms returns the time of entry i, which must be in [0, Cap()).
func (x Times) ms(i int) int64 {
	return int64(binary.BigEndian.Uint64(x.Buf[i*TimeEntrySize : i*TimeEntrySize+8]))
}

// rel returns the relative offset of entry i, which must be in [0, Cap()).
func (x Times) rel(i int) uint32 {
	return binary.BigEndian.Uint32(x.Buf[i*TimeEntrySize+8 : i*TimeEntrySize+12])
}

// FirstAtOrAfter returns the index of the first entry among the first n with
// ms >= t, or n when there is none, found with warmsearch over the warm last
// WarmEntries(12) entries first. An n above Cap() is treated as Cap(), and
// an n below 0 as 0.
func (x Times) FirstAtOrAfter(n int, t int64) int {
	n = clamp(n, x.Cap())
	return warmsearch.Search(n, warmsearch.WarmEntries(TimeEntrySize), func(k int) bool {
		return x.ms(k) >= t
	})
}

// FloorRel returns the index of the greatest entry among the first n whose
// rel <= target, like Offsets.Floor; ok is false and i is -1 when there is
// none. An n above Cap() is treated as Cap().
func (x Times) FloorRel(n int, target uint32) (i int, ok bool) {
	n = clamp(n, x.Cap())
	j := warmsearch.Search(n, warmsearch.WarmEntries(TimeEntrySize), func(k int) bool {
		return x.rel(k) > target
	})
	if j == 0 {
		return -1, false
	}
	return j - 1, true
}

// Valid returns how many leading entries are valid. It stops at the first
// entry that is all zero or has rel 0 (the first record of a segment never
// has an entry), has an ms lower than the previous entry's, or has a rel not
// greater than the previous entry's. It never reads past Buf.
func (x Times) Valid() int {
	var prevMs int64
	var prevRel uint32
	for i := range x.Cap() {
		ms, rel := x.Entry(i)
		if rel == 0 {
			return i
		}
		if i > 0 && (ms < prevMs || rel <= prevRel) {
			return i
		}
		prevMs, prevRel = ms, rel
	}
	return x.Cap()
}
