package queue

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
}

const posChunk = 512

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
		if c == nil {
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
	for l.start >= posChunk || l.n == 0 && len(l.chunks) > 0 {
		if cap(l.chunks[0]) == posChunk {
			l.spare = l.chunks[0]
		}
		l.chunks[0] = nil
		l.chunks = l.chunks[1:]
		l.start = max(0, l.start-posChunk)
		if l.n == 0 {
			l.start = 0
		}
	}
	if len(l.chunks) == 0 {
		l.chunks = nil
	}
}

// clear forgets every entry and the memory.
func (l *posList) clear() { *l = posList{} }
