package inflight

import "math/bits"

// chunkBits is log2 of the offsets per chunk; one bitmap word per chunk.
const (
	chunkBits = 6
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// chunk records the state of chunkSize consecutive offsets starting at a
// multiple of chunkSize. An offset is done, live (in flight or ready: it has
// a slot) or unset (not handed out). The zero chunk is all unset.
type chunk struct {
	done uint64 // bit i: offset base+i is done
	live uint64 // bit i: offset base+i has slot i of the block
	blk  int32  // 1 + block number in Table.slots, 0 if no block
}

// slot is the per-message record of a live offset.
type slot struct {
	pos  int32  // position in its heap, encoded as in heap.mark
	recv uint32 // receive count, saturating
}

// bit returns the chunk bit of offset off.
func bit(off uint64) uint64 { return 1 << (off & chunkMask) }

// ring is a double-ended queue of chunks covering chunk numbers
// [base, base+n). Its buffer length is zero or a power of two.
type ring struct {
	c     []chunk
	start int
	n     int
	base  uint64 // chunk number of the front chunk
}

// at returns chunk number k, or nil if k is not covered.
func (r *ring) at(k uint64) *chunk {
	if k < r.base || k-r.base >= uint64(r.n) {
		return nil
	}
	return &r.c[(r.start+int(k-r.base))&(len(r.c)-1)]
}

// extend covers chunk numbers up to and including k (k >= r.base) and
// returns chunk k.
func (r *ring) extend(k uint64) *chunk {
	for r.base+uint64(r.n) <= k {
		if r.n == len(r.c) {
			r.grow()
		}
		r.n++
	}
	return r.at(k)
}

// grow doubles the buffer, keeping the chunks in order. New chunks are zero.
func (r *ring) grow() {
	c := make([]chunk, max(16, 2*len(r.c)))
	for i := range r.n {
		c[i] = r.c[(r.start+i)&(len(r.c)-1)]
	}
	r.c, r.start = c, 0
}

// trim drops front chunks below chunk number k; they must hold no block.
func (r *ring) trim(k uint64) {
	for r.base < k {
		if r.n == 0 {
			r.base = k
			return
		}
		r.c[r.start] = chunk{}
		r.start = (r.start + 1) & (len(r.c) - 1)
		r.n--
		r.base++
	}
}

// nextBit returns the lowest set bit of w and w without it; w must be
// non-zero.
func nextBit(w uint64) (i uint, rest uint64) {
	return uint(bits.TrailingZeros64(w)), w & (w - 1)
}
