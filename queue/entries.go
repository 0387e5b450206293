package queue

import (
	"slices"

	"github.com/pagelog/pagelog/engine"
)

// The state of the messages the cursor has passed and that are not deleted
// (the in-flight table, inflight.Table, keeps only which offsets are done,
// so that the head can move). Each such message has an entry in a slab,
// found by offset through a map, in exactly one state:
//
//	state     meaning                                        where
//	delayed   its due time has not come                      due heap (key: due)
//	waiting   an earlier message of its group is not done    its group's line
//	ready     may be handed out now                          ready heap (key: offset)
//	inFlight  handed out, deadline not passed                flight heap (key: deadline)
//	dying     to be moved to the dead letters                Queue.dying
//	moving    being moved to the dead letters, or redriven   (nowhere)
//
// A grouped message sits in its group's line too, in offset order, from
// the moment the cursor passes it until it is done: only the front of a
// line is ever delayed, ready, in flight, dying or moving; the others wait.
//
// All of it is guarded by Queue.mu.

type mstate uint8

const (
	stDelayed mstate = iota
	stWaiting
	stReady
	stInFlight
	stDying
	stMoving
	nStates
)

// entry is one message. at is the due time (delayed, and waiting: 0 when
// none) or the deadline (in flight), in the queue's time.
type entry struct {
	off  uint64 // the offset consumers know the message by
	stor uint64 // the offset of its record: off, or its newest moved copy's
	// handSeg is the segment (base offset) of the record its last
	// hand-out after the first was served from, pinned in Queue.pins
	// until that hand-out's deadline (the record may have moved since).
	handSeg uint64
	at      int64
	recv    uint32 // receives, those restored from the receive-count log included
	pos     int32  // position in its heap, -1 when in none
	group   int32  // index in entries.groups, -1 when none
	state   mstate
	handed  bool // handed out since the queue was opened
	// pin is, while the entry is in flight after its first hand-out in
	// this process, 1 + the index in entries.pins of that hand-out's
	// record; 0 when none.
	pin int32
}

// group is the line of one ordering group: the entries of its messages
// that the cursor has passed and that are not done, oldest first.
type group struct {
	name  string
	line  []int32 // entry indexes; line[first] is the front
	first int
}

func (g *group) front() int32 { return g.line[g.first] }

func (g *group) size() int { return len(g.line) - g.first }

// entries holds the entries, their heaps and the groups.
type entries struct {
	e      []entry
	free   []int32
	byOff  map[uint64]int32
	moved  map[uint64]int32 // entries whose record is a moved copy, by the copy's offset
	due    heap             // delayed entries by due time, then offset
	flight heap             // in-flight entries by deadline, then offset (apart from due, so that a
	// backlog of delayed messages costs the hand-outs nothing)
	ready  heap // ready entries by offset
	n      [nStates]int
	nAgain int // ready entries that were handed out before (Stats.ReadyAgain)

	groups     []group
	freeGroups []int32
	byGroup    map[string]int32
	nWaiting   int // groups with more than one message in line

	// pins keep the records of first hand-outs while they are in flight
	// (a slab with a free list): only their receiver can delete them, so
	// a delete, a release or the deadline ends the body's lifetime, and
	// the segment goes as soon as its last such body does. Later
	// hand-outs, which a late receiver's delete must not cut short, are
	// pinned by segment until their deadline (Queue.pins).
	pins     []engine.Record
	freePins []int32
}

func newEntries() *entries {
	es := &entries{byOff: map[uint64]int32{}, moved: map[uint64]int32{}, byGroup: map[string]int32{}}
	byTime := func(a, b int32) bool {
		x, y := &es.e[a], &es.e[b]
		return x.at < y.at || x.at == y.at && x.off < y.off
	}
	es.due.less, es.flight.less = byTime, byTime
	es.ready.less = func(a, b int32) bool { return es.e[a].off < es.e[b].off }
	es.due.es, es.flight.es, es.ready.es = es, es, es
	return es
}

// add makes an entry for off, in no state yet (the caller sets one), in
// group g ("" for none), and returns its index.
func (es *entries) add(off uint64, recv uint32, g []byte) int32 {
	i := slabAlloc(&es.e, &es.free)
	es.e[i] = entry{off: off, stor: off, recv: recv, pos: -1, group: -1, state: nStates}
	es.byOff[off] = i
	if g != nil {
		k, ok := es.byGroup[string(g)]
		if !ok {
			k = es.newGroup(string(g))
		}
		es.e[i].group = k
		es.groups[k].insert(es, i)
		if es.groups[k].size() == 2 {
			es.nWaiting++
		}
	}
	return i
}

// insert puts entry i in the line in offset order. Entries come in offset
// order but for a moved message found at open after a crash in the middle
// of its move (see restoreMoved): never in front of the front, which may
// be handed out already.
func (g *group) insert(es *entries, i int32) {
	k := len(g.line)
	for k > g.first+1 && es.e[g.line[k-1]].off > es.e[i].off {
		k--
	}
	g.line = slices.Insert(g.line, k, i)
}

func (es *entries) newGroup(name string) int32 {
	k := slabAlloc(&es.groups, &es.freeGroups)
	es.groups[k] = group{name: name}
	es.byGroup[name] = k
	return k
}

// slabAlloc returns the index of a free element of *slab: one from *free,
// else a new one.
func slabAlloc[T any](slab *[]T, free *[]int32) int32 {
	if n := len(*free); n > 0 {
		i := (*free)[n-1]
		*free = (*free)[:n-1]
		return i
	}
	var zero T
	*slab = append(*slab, zero)
	return int32(len(*slab) - 1)
}

// setStor makes the record at stor, a moved copy, entry i's record.
func (es *entries) setStor(i int32, stor uint64) {
	x := &es.e[i]
	if x.stor != x.off {
		delete(es.moved, x.stor)
	}
	x.stor = stor
	if stor != x.off {
		es.moved[stor] = i
	}
}

// lookup returns the index of the entry of off.
func (es *entries) lookup(off uint64) (int32, bool) {
	i, ok := es.byOff[off]
	return i, ok
}

// front reports whether entry i may leave the waiting state: it has no
// group, or it is its group's front.
func (es *entries) front(i int32) bool {
	g := es.e[i].group
	return g < 0 || es.groups[g].front() == i
}

// groupName returns the name of entry i's group, "" when none.
func (es *entries) groupName(i int32) string {
	if g := es.e[i].group; g >= 0 {
		return es.groups[g].name
	}
	return ""
}

// set moves entry i (in no state: new, or just taken out of one by unset)
// into state st with time at.
func (es *entries) set(i int32, st mstate, at int64) {
	x := &es.e[i]
	x.state, x.at = st, at
	es.n[st]++
	switch st {
	case stDelayed:
		es.due.push(i)
	case stInFlight:
		es.flight.push(i)
	case stReady:
		es.ready.push(i)
		if x.handed {
			es.nAgain++
		}
	}
}

// next returns the earliest due time or deadline, ok false when no entry
// is delayed or in flight.
func (es *entries) next() (at int64, ok bool) {
	for _, h := range []*heap{&es.due, &es.flight} {
		if h.len() > 0 {
			if t := es.e[h.top()].at; !ok || t < at {
				at, ok = t, true
			}
		}
	}
	return at, ok
}

// takeDue takes every delayed or in-flight entry whose time is at or
// before now out of its state, and returns them in order of time.
func (es *entries) takeDue(now int64) []int32 {
	due := es.takeDueFrom(&es.due, now, nil)
	due = es.takeDueFrom(&es.flight, now, due)
	slices.SortFunc(due, func(a, b int32) int {
		if es.flight.less(a, b) {
			return -1
		}
		return 1
	})
	for _, i := range due {
		x := &es.e[i]
		if x.state == stInFlight {
			es.unpin(i)
		}
		es.n[x.state]--
		x.state, x.pos = nStates, -1
	}
	return due
}

// takeDueFrom appends to due the entries of h whose time is at or before
// now, and takes them out of h. They form a subtree at the top of the
// heap: it visits only them, and when they are many it rebuilds the heap
// rather than pop each.
func (es *entries) takeDueFrom(h *heap, now int64, due []int32) []int32 {
	if h.len() == 0 || es.e[h.top()].at > now {
		return due
	}
	from := len(due)
	due = append(due, h.top())
	for k := from; k < len(due); k++ {
		p := int(es.e[due[k]].pos)
		for c := 2*p + 1; c <= 2*p+2 && c < len(h.h); c++ {
			if es.e[h.h[c]].at <= now {
				due = append(due, h.h[c])
			}
		}
	}
	if k := len(due) - from; k > len(h.h)/16 {
		keep := h.h[:0]
		for _, i := range h.h {
			if es.e[i].at > now {
				keep = append(keep, i)
			}
		}
		h.h = keep
		h.heapify()
	} else {
		for range k {
			h.pop()
		}
	}
	return due
}

// setReady makes the entries of list, in no state, ready: one push each,
// or when they are many one rebuild of the ready heap.
func (es *entries) setReady(list []int32) {
	h := &es.ready
	if len(list) <= len(h.h)/16+16 {
		for _, i := range list {
			es.set(i, stReady, 0)
		}
		return
	}
	for _, i := range list {
		x := &es.e[i]
		x.state, x.at = stReady, 0
		es.n[stReady]++
		if x.handed {
			es.nAgain++
		}
		h.h = append(h.h, i)
	}
	h.heapify()
}

// unset takes entry i out of its state (and its heap).
func (es *entries) unset(i int32) {
	x := &es.e[i]
	if x.state == nStates {
		return
	}
	es.n[x.state]--
	switch x.state {
	case stDelayed:
		es.due.remove(x.pos)
	case stInFlight:
		es.flight.remove(x.pos)
		es.unpin(i)
	case stReady:
		es.ready.remove(x.pos)
		if x.handed {
			es.nAgain--
		}
	}
	x.state = nStates
}

// pin keeps r, the record of entry i's body just handed out for the
// first time, while the entry is in flight.
func (es *entries) pin(i int32, r engine.Record) {
	es.unpin(i)
	k := slabAlloc(&es.pins, &es.freePins)
	es.pins[k] = r
	es.e[i].pin = k + 1
}

// unpin releases the record entry i's first hand-out pinned, if any.
func (es *entries) unpin(i int32) {
	x := &es.e[i]
	if x.pin == 0 {
		return
	}
	k := x.pin - 1
	es.pins[k].Release()
	es.pins[k] = engine.Record{}
	es.freePins = append(es.freePins, k)
	x.pin = 0
}

// releasePins releases every pinned record (Close).
func (es *entries) releasePins() {
	for i := range es.e {
		es.e[i].pin = 0
	}
	for _, r := range es.pins {
		r.Release()
	}
	es.pins, es.freePins = nil, nil
}

// drop forgets entry i, which is in no state, and returns the index of the
// next message of its group, which becomes the front, or -1.
func (es *entries) drop(i int32) int32 {
	x := es.e[i]
	delete(es.byOff, x.off)
	if x.stor != x.off {
		delete(es.moved, x.stor)
	}
	es.e[i] = entry{pos: -1, group: -1, state: nStates}
	es.free = append(es.free, i)
	if x.group < 0 {
		return -1
	}
	g := &es.groups[x.group]
	wasFront := g.front() == i
	if wasFront {
		g.first++
	} else {
		for k := g.first; k < len(g.line); k++ {
			if g.line[k] == i {
				g.line = append(g.line[:k], g.line[k+1:]...)
				break
			}
		}
	}
	if g.size() == 1 {
		es.nWaiting--
	}
	if g.size() == 0 {
		delete(es.byGroup, g.name)
		*g = group{}
		es.freeGroups = append(es.freeGroups, x.group)
		return -1
	}
	if g.first > 64 && g.first > len(g.line)/2 {
		g.line = append(g.line[:0], g.line[g.first:]...)
		g.first = 0
	}
	if !wasFront {
		return -1
	}
	return g.front()
}

// groupCounts returns how many groups have a line, and how many of them
// hold a message waiting behind an earlier one.
func (es *entries) groupCounts() (groups, waiting int) {
	return len(es.byGroup), es.nWaiting
}

// heap is a binary min-heap of entry indexes that keeps each entry's pos
// up to date.
type heap struct {
	h    []int32
	less func(a, b int32) bool
	es   *entries
}

func (h *heap) len() int { return len(h.h) }

func (h *heap) top() int32 { return h.h[0] }

func (h *heap) place(k int, i int32) {
	h.h[k] = i
	h.es.e[i].pos = int32(k)
}

func (h *heap) push(i int32) {
	h.h = append(h.h, i)
	h.up(len(h.h)-1, i)
}

// pop removes and returns the top; the heap must not be empty.
func (h *heap) pop() int32 {
	i := h.h[0]
	h.remove(0)
	return i
}

// remove removes the element at position k.
func (h *heap) remove(k int32) {
	i := h.h[k]
	n := len(h.h) - 1
	last := h.h[n]
	h.h = h.h[:n]
	h.es.e[i].pos = -1
	if int(k) < n {
		if k > 0 && h.less(last, h.h[(k-1)/2]) {
			h.up(int(k), last)
		} else {
			h.down(int(k), last)
		}
	}
	if n == 0 && cap(h.h) > 4096 {
		h.h = nil // let the backing array of a burst go
	}
}

// heapify establishes the heap order, and every element's pos, in O(n).
func (h *heap) heapify() {
	for k, i := range h.h {
		h.es.e[i].pos = int32(k)
	}
	for k := len(h.h)/2 - 1; k >= 0; k-- {
		h.down(k, h.h[k])
	}
}

// fix restores the order after the key of the element at k changed.
func (h *heap) fix(k int32) {
	i := h.h[k]
	if k > 0 && h.less(i, h.h[(k-1)/2]) {
		h.up(int(k), i)
	} else {
		h.down(int(k), i)
	}
}

func (h *heap) up(k int, i int32) {
	for k > 0 {
		p := (k - 1) / 2
		if !h.less(i, h.h[p]) {
			break
		}
		h.place(k, h.h[p])
		k = p
	}
	h.place(k, i)
}

func (h *heap) down(k int, i int32) {
	n := len(h.h)
	for {
		c := 2*k + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.less(h.h[r], h.h[c]) {
			c = r
		}
		if !h.less(h.h[c], i) {
			break
		}
		h.place(k, h.h[c])
		k = c
	}
	h.place(k, i)
}
