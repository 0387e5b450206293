package sparseidx

import (
	"encoding/binary"
	"io"

	"github.com/pagelog/pagelog/warmsearch"
)

// On-disk format: never change, bump the version instead.
const (
	OffsetEntrySize = 8  // rel uint32, pos uint32
	TimeEntrySize   = 12 // ms int64, rel uint32
)

// Offsets views an offset index: Buf holds n entries, where the caller tracks
// n; Buf may be longer, zero-filled beyond the last entry.
type Offsets struct{ Buf []byte }

// Cap returns how many whole entries fit in Buf: len(Buf)/8. Trailing bytes
// that do not make a whole entry are ignored.
func (x Offsets) Cap() int { return len(x.Buf) / OffsetEntrySize }

// Entry returns entry i. An i outside [0, Cap()) reads as the zero entry.
func (x Offsets) Entry(i int) (rel, pos uint32) {
	if i < 0 || i >= x.Cap() {
		return 0, 0
	}
	e := x.Buf[i*OffsetEntrySize : i*OffsetEntrySize+OffsetEntrySize]
	return binary.BigEndian.Uint32(e[0:4]), binary.BigEndian.Uint32(e[4:8])
}

// Put writes entry i; Buf must be writable. It returns io.ErrShortBuffer,
// writing nothing, when i is outside [0, Cap()).
func (x Offsets) Put(i int, rel, pos uint32) error {
	if i < 0 || i >= x.Cap() {
		return io.ErrShortBuffer
	}
	e := x.Buf[i*OffsetEntrySize : i*OffsetEntrySize+OffsetEntrySize]
	binary.BigEndian.PutUint32(e[0:4], rel)
	binary.BigEndian.PutUint32(e[4:8], pos)
	return nil
}

// Floor returns the greatest entry among the first n whose rel <= target,
// found with warmsearch's order over the warm last WarmEntries(8) entries
// first. It returns ok == false, i == -1 and zero rel and pos when no entry
// has rel <= target (n <= 0 included): the caller then starts at position 0.
// An n above Cap() is treated as Cap().
//
// It is warmsearch.Search written out for this one layout, without a
// function value per probe: every verified Read does one, and the calls
// were a fifth of a recent read's instructions.
func (x Offsets) Floor(n int, target uint32) (i int, rel, pos uint32, ok bool) {
	n = clamp(n, x.Cap())
	buf := x.Buf[:n*OffsetEntrySize]
	lo, hi := 0, n
	if warm := warmsearch.WarmEntries(OffsetEntrySize); n > warm {
		// As warmsearch.SearchRegion: the tail [n-warm, n) unless the
		// entry before it is already past target.
		if b := n - warm; relAt(buf, b-1) > target {
			hi = b - 1
		} else {
			lo = b
		}
	}
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if relAt(buf, h) > target {
			hi = h
		} else {
			lo = h + 1
		}
	}
	if lo == 0 {
		return -1, 0, 0, false
	}
	rel, pos = x.Entry(lo - 1)
	return lo - 1, rel, pos, true
}

// relAt returns the relative offset of entry k of buf, a whole number of
// entries.
func relAt(buf []byte, k int) uint32 {
	return binary.BigEndian.Uint32(buf[k*OffsetEntrySize : k*OffsetEntrySize+4])
}

// Valid returns how many leading entries are valid for a segment of
// segmentSize bytes. It stops at the first entry that is all zero, has rel 0
// or pos 0 (the first record of a segment never has an entry), has a rel not
// greater than the previous entry's, a pos not greater than the previous
// entry's, or a pos >= segmentSize. It never reads past Buf.
func (x Offsets) Valid(segmentSize int64) int {
	var prevRel, prevPos uint32
	for i := range x.Cap() {
		rel, pos := x.Entry(i)
		if rel == 0 || pos == 0 || int64(pos) >= segmentSize {
			return i
		}
		if i > 0 && (rel <= prevRel || pos <= prevPos) {
			return i
		}
		prevRel, prevPos = rel, pos
	}
	return x.Cap()
}

// clamp limits a caller's entry count n to [0, limit].
func clamp(n, limit int) int {
	return max(0, min(n, limit))
}
