package queue

import "sync"

// posList is a store view's map from its offsets to shared-log
// positions: a queue of uint64 in chunks of posChunk entries. Appends
// fill the last chunk and add a new one when it is full; dropping from
// the front frees whole chunks. Nothing is ever copied but the small list
// of chunks, so an append never stalls on a copy of the map, however
// many records a queue holds between checkpoints. A view of one record
// takes one small chunk.
type posList struct {
	chunks [][]uint64 // chunks[0][start] is entry 0
	start  int
	n      int
	spare  []uint64 // a freed chunk kept for the next (no allocation while the head follows the end)
	busy   bool     // a full chunk was let go: new chunks come full-size (spare, posChunks)
}

const posChunk = 512

// posChunks holds the full chunks the views' heads have left, for the
// views' next chunks: a queue whose head follows its end reuses them and
// allocates nothing (each allocation brings the collector's next cycle
// closer, and its cycles show in the queue's tail latency). The pool
// keeps none through two collections, so nothing stays pinned.
var posChunks = sync.Pool{New: func() any { return new([posChunk]uint64) }}

func (l *posList) len() int { return l.n }

func (l *posList) at(i int) uint64 {
	i += l.start
	return l.chunks[i/posChunk][i%posChunk]
}

func (l *posList) set(i int, p uint64) {
	i += l.start
	l.chunks[i/posChunk][i%posChunk] = p
}

func (l *posList) push(p uint64) {
	if k := len(l.chunks); k > 0 {
		// Room in the last chunk (the common case): the entries are
		// contiguous, so the next one goes there.
		if c := &l.chunks[k-1]; len(*c) < cap(*c) {
			*c = append(*c, p)
			l.n++
			return
		}
	}
	i := l.start + l.n
	if k := i / posChunk; k == len(l.chunks) {
		c := l.spare
		l.spare = nil
		switch {
		case c != nil:
		case l.busy || len(l.chunks) > 0:
			c = posChunks.Get().(*[posChunk]uint64)[:0]
		default:
			// The first chunk of a view starts small: most queues
			// hold a few records.
			c = make([]uint64, 0, min(posChunk, max(4, 2*l.n)))
		}
		l.chunks = append(l.chunks, c[:0])
	}
	c := &l.chunks[len(l.chunks)-1]
	if len(*c) == cap(*c) { // a small first chunk, full: grow it
		g := make([]uint64, len(*c), min(posChunk, 2*cap(*c)))
		copy(g, *c)
		*c = g
	}
	*c = append(*c, p)
	l.n++
}

// dropFront forgets the first k entries.
func (l *posList) dropFront(k int) {
	k = min(k, l.n)
	l.start += k
	l.n -= k
	d := 0 // chunks let go
	for l.start >= posChunk || l.n == 0 && d < len(l.chunks) {
		if c := l.chunks[d]; cap(c) == posChunk {
			l.busy = true
			if l.spare == nil {
				l.spare = c[:0]
			} else {
				posChunks.Put((*[posChunk]uint64)(c[:posChunk]))
			}
		}
		d++
		l.start = max(0, l.start-posChunk)
		if l.n == 0 {
			l.start = 0
		}
	}
	if d == 0 {
		return
	}
	if d == len(l.chunks) {
		l.chunks = nil
		return
	}
	// The chunks left move to the front, so that the list's appends
	// reuse its array rather than grow a new one.
	left := copy(l.chunks, l.chunks[d:])
	clear(l.chunks[left:])
	l.chunks = l.chunks[:left]
}

// clear forgets every entry and the memory.
func (l *posList) clear() { *l = posList{} }
