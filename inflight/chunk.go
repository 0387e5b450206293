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
// [base, base+n+skipped), where skipped counts the chunks of its gaps. Its
// buffer length is zero or a power of two.
//
// A gap is a run of chunks whose offsets are all done, held as its bounds
// only: a range skipped while a message below it is live (Table.Skip)
// costs neither a chunk per 64 offsets nor a step per offset, however
// many offsets it spans (2^40 offsets took 400 GB of chunks and hours).
type ring struct {
	c     []chunk
	start int
	n     int
	base  uint64 // chunk number of the front chunk
	gaps  []gap  // ascending, each above base, none empty
	// gapChunk is what at returns for a chunk in a gap: every offset done.
	gapChunk chunk
}

// gap is the chunk numbers [from, to), every offset of them done.
type gap struct{ from, to uint64 }

// at returns chunk number k, or nil if k is not covered.
func (r *ring) at(k uint64) *chunk {
	if k < r.base {
		return nil
	}
	i := k - r.base
	for _, g := range r.gaps {
		if k < g.from {
			break
		}
		if k < g.to {
			r.gapChunk = chunk{done: ^uint64(0)}
			return &r.gapChunk
		}
		i -= g.to - g.from
	}
	if i >= uint64(r.n) {
		return nil
	}
	return &r.c[(r.start+int(i))&(len(r.c)-1)]
}

// gapEnd returns the end of the gap that holds chunk number k, 0 when no
// gap holds it.
func (r *ring) gapEnd(k uint64) uint64 {
	for _, g := range r.gaps {
		if k >= g.from && k < g.to {
			return g.to
		}
	}
	return 0
}

// end returns the chunk number past the covered range.
func (r *ring) end() uint64 {
	e := r.base + uint64(r.n)
	for _, g := range r.gaps {
		e += g.to - g.from
	}
	return e
}

// extend covers chunk numbers up to and including k (k >= r.base) and
// returns chunk k.
func (r *ring) extend(k uint64) *chunk {
	for e := r.end(); e <= k; e++ {
		if r.n == len(r.c) {
			r.grow()
		}
		r.n++
	}
	return r.at(k)
}

// skip covers chunk numbers [r.end(), to) with a gap: every offset of them
// done.
func (r *ring) skip(to uint64) {
	from := r.end()
	if to <= from {
		return
	}
	if k := len(r.gaps) - 1; k >= 0 && r.gaps[k].to == from {
		r.gaps[k].to = to
		return
	}
	r.gaps = append(r.gaps, gap{from, to})
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
		if len(r.gaps) > 0 && r.gaps[0].from == r.base {
			g := &r.gaps[0]
			r.base = min(g.to, k)
			if g.from = r.base; g.from == g.to {
				r.gaps = r.gaps[1:]
			}
			continue
		}
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
