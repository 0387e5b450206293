package inflight

import (
	"errors"
	"math"
	"math/bits"
	"slices"
)

// Errors returned by a Table.
var (
	// ErrUnknown is returned by Done for an offset that was never handed
	// out: at or above the cursor, or not registered while restoring. The
	// engine maps it to its ErrNotInFlight.
	ErrUnknown = errors.New("inflight: offset not handed out")

	// ErrOrder reports a call out of sequence: Add of an offset other than
	// the cursor or before SetCursor ended a restore, AddReady of an offset
	// below the cursor or already registered, SetCursor below a registered
	// offset. It is a bug in the caller; the table is unchanged.
	ErrOrder = errors.New("inflight: offset out of order")
)

// State is the state of one offset.
type State uint8

// The states of an offset. Done returns the state the offset was in.
const (
	StateUnknown  State = iota // not handed out
	StateInFlight              // handed out, deadline not yet expired
	StateReady                 // waiting in the ready-again list
	StateDone                  // deleted (every offset below head is done)
)

var stateNames = [...]string{"unknown", "in flight", "ready", "done"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(?)"
}

// Table is the in-flight state of one queue. Create it with New. It is not
// safe for concurrent use.
type Table struct {
	head   uint64 // oldest offset not done
	cursor uint64 // oldest offset not handed out
	hi     uint64 // 1 + highest registered offset, >= cursor; == cursor outside restore

	dir    ring     // chunks covering [head, hi)
	slots  []slot   // blocks of chunkSize slots
	owner  []uint64 // chunk number that owns each block
	free   []int32  // block numbers not in use
	flight heap[int64]
	ready  heap[uint64]
}

// New returns an empty table whose head and cursor are head.
func New(head uint64) *Table {
	t := &Table{head: head, cursor: head, hi: head}
	t.dir.base = head >> chunkBits
	t.ready.mark = -1
	return t
}

// Head returns the oldest offset not yet done.
func (t *Table) Head() uint64 { return t.head }

// Cursor returns the oldest offset never handed out: the next Add's offset.
func (t *Table) Cursor() uint64 { return t.cursor }

// InFlight returns how many messages are handed out with a pending deadline.
func (t *Table) InFlight() int { return t.flight.len() }

// ReadyAgain returns how many messages wait to be handed out again.
func (t *Table) ReadyAgain() int { return t.ready.len() }

// Len returns how many messages are live: InFlight() + ReadyAgain().
func (t *Table) Len() int { return t.flight.len() + t.ready.len() }

// Add hands out the message at the cursor with the given deadline and
// receive count 1, and advances the cursor. It returns ErrOrder if offset is
// not the cursor or a restore is not finished with SetCursor.
func (t *Table) Add(offset uint64, deadline int64) error {
	if offset != t.cursor || t.hi != t.cursor {
		return ErrOrder
	}
	c := t.dir.extend(offset >> chunkBits)
	ref := t.attach(c, offset, 1)
	t.flight.push(t.slots, entry[int64]{deadline, ref})
	t.cursor++
	t.hi++
	return nil
}

// Skip moves the cursor past [Cursor(), to): offsets that are done without
// ever being handed out (deleted before a restart, or lost). When nothing
// below the cursor is live (Head() == Cursor()) it costs O(1) whatever the
// range, and the head moves with it; otherwise it costs a step for each
// offset in the first and last 64 of the range, and the whole chunks
// between become a gap of the table (their bounds only), which the head
// later passes in one step. It returns ErrOrder during a restore.
func (t *Table) Skip(to uint64) error {
	if to <= t.cursor {
		return nil
	}
	if t.hi != t.cursor {
		return ErrOrder
	}
	if t.head == t.cursor {
		t.head, t.cursor, t.hi = to, to, to
		t.dir.trim(to >> chunkBits)
		return nil
	}
	// The offsets in the cursor's chunk one by one, then the whole chunks
	// as a gap (see ring), then those in the last chunk.
	from := t.cursor
	if whole := to >> chunkBits; whole > from>>chunkBits+1 {
		t.markDone(from, (from>>chunkBits+1)<<chunkBits)
		t.dir.skip(whole)
		from = whole << chunkBits
	}
	t.markDone(from, to)
	t.cursor, t.hi = to, to
	t.advance()
	return nil
}

// markDone marks the offsets [from, to) done; the caller moves the cursor.
func (t *Table) markDone(from, to uint64) {
	for off := from; off < to; off++ {
		t.dir.extend(off >> chunkBits).done |= bit(off)
	}
}

// NextDeadline returns the earliest deadline of a message in flight, and
// false if none is in flight.
func (t *Table) NextDeadline() (int64, bool) {
	if t.flight.len() == 0 {
		return 0, false
	}
	return t.flight.e[0].key, true
}

// Expire moves every in-flight message whose deadline is <= now to the
// ready-again list and returns how many it moved.
//
// It visits only the expired entries (they form a subtree at the top of the
// deadline heap) and costs O(k log n) for k of n in flight, or O(n) when k
// is a large share of n and the heaps are rebuilt instead.
func (t *Table) Expire(now int64) int {
	f := &t.flight
	if f.len() == 0 || f.e[0].key > now {
		return 0
	}
	from := t.ready.len()
	// At most every in-flight entry moves: grow the ready-again array once
	// rather than by doubling while a mass expiry walks (each doubling
	// copies, and fresh memory is not free).
	t.ready.e = slices.Grow(t.ready.e, f.len())
	t.collect(now)
	k := t.ready.len() - from
	if k > f.len()/bulk {
		f.keepAbove(t.slots, now)
	} else {
		for range k {
			f.pop(t.slots)
		}
	}
	t.ready.fix(t.slots, from)
	return k
}

// collect appends every in-flight entry with a deadline <= now to the
// ready-again heap's array, breadth first from the top of the deadline heap,
// without touching the slots: their positions still point into the
// deadline heap, which is how the walk finds each entry's children.
func (t *Table) collect(now int64) {
	f, r := &t.flight, &t.ready
	r.e = append(r.e, entry[uint64]{t.offsetOf(f.e[0].ref), f.e[0].ref})
	for q := len(r.e) - 1; q < len(r.e); q++ {
		i := f.index(t.slots[r.e[q].ref].pos)
		for c := 2*i + 1; c <= 2*i+2 && c < f.len(); c++ {
			if f.e[c].key <= now {
				r.e = append(r.e, entry[uint64]{t.offsetOf(f.e[c].ref), f.e[c].ref})
			}
		}
	}
}

// PopReady hands out again the ready-again message with the lowest offset:
// it goes back in flight with the given deadline and one more receive. It
// returns the offset and the new receive count, or ok == false if the
// ready-again list is empty.
func (t *Table) PopReady(deadline int64) (offset uint64, receives int, ok bool) {
	if t.ready.len() == 0 {
		return 0, 0, false
	}
	e := t.ready.pop(t.slots)
	s := &t.slots[e.ref]
	if s.recv < math.MaxUint32 {
		s.recv++
	}
	t.flight.push(t.slots, entry[int64]{deadline, e.ref})
	return e.key, int(s.recv), true
}

// Done deletes the message at offset and returns the state it was in:
// StateInFlight or StateReady (deleted now), StateDone (deleted before; the
// caller treats the delete as done) or StateUnknown with ErrUnknown (never
// handed out). The head then moves past every done offset at its front.
func (t *Table) Done(offset uint64) (State, error) {
	c, st := t.lookup(offset)
	switch st {
	case StateUnknown:
		return st, ErrUnknown
	case StateDone:
		return st, nil
	}
	t.detach(c, offset)
	c.done |= bit(offset)
	t.advance()
	return st, nil
}

// Get returns the state of a live message: its deadline (0 when ready
// again), its receive count and whether it is in flight. ok is false when
// the offset is done or not handed out.
func (t *Table) Get(offset uint64) (deadline int64, receives int, inFlight bool, ok bool) {
	c, st := t.lookup(offset)
	if st != StateInFlight && st != StateReady {
		return 0, 0, false, false
	}
	s := t.slots[t.ref(c, offset)]
	if st == StateInFlight {
		deadline = t.flight.e[t.flight.index(s.pos)].key
	}
	return deadline, int(s.recv), st == StateInFlight, true
}

// State returns the state of offset.
func (t *Table) State(offset uint64) State {
	_, st := t.lookup(offset)
	return st
}

// lookup returns the chunk of offset (nil below head or beyond the covered
// range) and the offset's state.
func (t *Table) lookup(off uint64) (*chunk, State) {
	if off < t.head {
		return nil, StateDone
	}
	c := t.dir.at(off >> chunkBits)
	switch {
	case c == nil:
		return nil, StateUnknown
	case c.done&bit(off) != 0:
		return c, StateDone
	case c.live&bit(off) == 0:
		return c, StateUnknown
	case t.slots[t.ref(c, off)].pos >= 0:
		return c, StateInFlight
	}
	return c, StateReady
}

// ref returns the slot index of live offset off in chunk c.
func (t *Table) ref(c *chunk, off uint64) int32 {
	return (c.blk-1)<<chunkBits | int32(off&chunkMask)
}

// offsetOf returns the offset whose slot is ref.
func (t *Table) offsetOf(ref int32) uint64 {
	return t.owner[ref>>chunkBits]<<chunkBits | uint64(ref&chunkMask)
}

// attach makes unset offset off of chunk c live with receive count recv
// and returns its slot index. The caller pushes it on a heap.
func (t *Table) attach(c *chunk, off uint64, recv uint32) int32 {
	if c.blk == 0 {
		c.blk = t.allocBlock(off>>chunkBits) + 1
	}
	c.live |= bit(off)
	ref := t.ref(c, off)
	t.slots[ref].recv = recv
	return ref
}

// detach removes live offset off of chunk c from its heap and clears its
// live bit, giving the chunk's block back when it was the last live offset.
func (t *Table) detach(c *chunk, off uint64) {
	ref := t.ref(c, off)
	if p := t.slots[ref].pos; p >= 0 {
		t.flight.remove(t.slots, t.flight.index(p))
	} else {
		t.ready.remove(t.slots, t.ready.index(p))
	}
	c.live &^= bit(off)
	if c.live == 0 {
		t.free = append(t.free, c.blk-1)
		c.blk = 0
	}
}

// maxBlocks keeps slot indexes within int32.
const maxBlocks = 1 << (31 - chunkBits)

// allocBlock returns a block of slots for chunk number k.
func (t *Table) allocBlock(k uint64) int32 {
	if n := len(t.free); n > 0 {
		b := t.free[n-1]
		t.free = t.free[:n-1]
		t.owner[b] = k
		return b
	}
	if len(t.owner) >= maxBlocks {
		panic("inflight: too many chunks with live messages")
	}
	b := int32(len(t.owner))
	t.slots = append(t.slots, make([]slot, chunkSize)...)
	t.owner = append(t.owner, k)
	return b
}

// advance moves the head past the done offsets at its front, never past
// the cursor, and drops the chunks it leaves behind.
func (t *Table) advance() {
	for t.head < t.cursor {
		if end := t.dir.gapEnd(t.head >> chunkBits); end != 0 {
			t.head = min(end<<chunkBits, t.cursor)
			t.dir.trim(t.head >> chunkBits)
			continue
		}
		c := t.dir.at(t.head >> chunkBits)
		sh := t.head & chunkMask
		n := ones(c.done >> sh) // at most chunkSize - sh
		if n == 0 {
			return
		}
		t.head = min(t.head+n, t.cursor)
		t.dir.trim(t.head >> chunkBits)
		if sh+n < chunkSize {
			return
		}
	}
}

// ones returns the number of trailing one bits of w.
func ones(w uint64) uint64 { return uint64(bits.TrailingZeros64(^w)) }
