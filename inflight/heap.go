package inflight

// key orders heap entries: deadlines in the in-flight heap, offsets in the
// ready-again heap.
type key interface{ ~int64 | ~uint64 }

// entry is one heap element: the ordering key next to the slot it belongs to,
// so that comparisons never leave the heap's own array.
type entry[K key] struct {
	key K
	ref int32 // index of the message's slot in Table.slots
}

// heap is a binary min-heap of entries that keeps each slot's pos field
// pointing at the slot's entry, so that any entry can be removed by its slot.
// A slot stores position i as int32(i) ^ mark: the in-flight heap uses mark
// 0 (pos >= 0), the ready-again heap mark -1 (pos < 0), so the sign of pos
// also tells which heap holds the slot.
type heap[K key] struct {
	e    []entry[K]
	mark int32
}

func (h *heap[K]) len() int { return len(h.e) }

// set stores x at position i and records the position in x's slot.
func (h *heap[K]) set(s []slot, i int, x entry[K]) {
	h.e[i] = x
	s[x.ref].pos = int32(i) ^ h.mark
}

// index decodes a slot's pos into a position in h.
func (h *heap[K]) index(pos int32) int { return int(pos ^ h.mark) }

func (h *heap[K]) push(s []slot, x entry[K]) {
	h.e = append(h.e, x)
	h.up(s, len(h.e)-1, x)
}

// pop removes and returns the minimum entry; h must not be empty.
func (h *heap[K]) pop(s []slot) entry[K] {
	return h.remove(s, 0)
}

// remove removes and returns the entry at position i.
func (h *heap[K]) remove(s []slot, i int) entry[K] {
	x := h.e[i]
	n := len(h.e) - 1
	last := h.e[n]
	h.e = h.e[:n]
	if i < n {
		if i > 0 && last.key < h.e[(i-1)/2].key {
			h.up(s, i, last)
		} else {
			h.down(s, i, last)
		}
	}
	return x
}

// up places x at the hole i or above it.
func (h *heap[K]) up(s []slot, i int, x entry[K]) {
	for i > 0 {
		p := (i - 1) / 2
		if h.e[p].key <= x.key {
			break
		}
		h.set(s, i, h.e[p])
		i = p
	}
	h.set(s, i, x)
}

// down places x at the hole i or below it.
func (h *heap[K]) down(s []slot, i int, x entry[K]) {
	n := len(h.e)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.e[r].key < h.e[c].key {
			c = r
		}
		if x.key <= h.e[c].key {
			break
		}
		h.set(s, i, h.e[c])
		i = c
	}
	h.set(s, i, x)
}

// bulk is the divisor that decides between fixing a heap entry by entry,
// O(k log n) for k entries, and rebuilding it, O(n): rebuild when k > n/bulk.
const bulk = 16

// fix restores the heap order after entries [from, len) were appended
// without their slots' positions.
func (h *heap[K]) fix(s []slot, from int) {
	if len(h.e)-from <= len(h.e)/bulk {
		for i := from; i < len(h.e); i++ {
			h.up(s, i, h.e[i])
		}
		return
	}
	h.reindex(s, from)
	h.heapify(s)
}

// keepAbove removes every entry whose key is <= k, in O(n).
func (h *heap[K]) keepAbove(s []slot, k K) {
	n := 0
	for _, x := range h.e {
		if x.key > k {
			h.e[n] = x
			n++
		}
	}
	h.e = h.e[:n]
	h.reindex(s, 0)
	h.heapify(s)
}

// reindex records the positions of entries [from, len) in their slots.
func (h *heap[K]) reindex(s []slot, from int) {
	for i := from; i < len(h.e); i++ {
		s[h.e[i].ref].pos = int32(i) ^ h.mark
	}
}

// heapify establishes the heap order in O(n); the slots' positions must be
// current.
func (h *heap[K]) heapify(s []slot) {
	for i := len(h.e)/2 - 1; i >= 0; i-- {
		h.down(s, i, h.e[i])
	}
}
