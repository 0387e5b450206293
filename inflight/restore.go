package inflight

import "math"

// MarkDone marks offset done, whatever its state: a live message is deleted,
// an offset not handed out yet is registered as deleted (the engine replays
// its delete log this way at open, in any order), an offset already done or
// below head is left alone. The head then moves past the done offsets at its
// front, up to the cursor.
//
// Memory for the registered range grows with its span: about 24 bytes per
// 64 offsets between head and the highest offset marked.
func (t *Table) MarkDone(offset uint64) {
	if offset < t.head {
		return
	}
	c := t.dir.extend(offset >> chunkBits)
	b := bit(offset)
	if c.done&b != 0 {
		return
	}
	if c.live&b != 0 {
		t.detach(c, offset)
	}
	c.done |= b
	t.hi = max(t.hi, offset+1)
	t.advance()
}

// AddReady registers offset, at or above the cursor and not registered yet,
// as ready again with the given receive count (clamped to [0, MaxUint32]).
// It is meant for restore, before SetCursor; otherwise it returns ErrOrder.
func (t *Table) AddReady(offset uint64, receives int) error {
	if offset < t.cursor {
		return ErrOrder
	}
	c := t.dir.extend(offset >> chunkBits)
	if (c.done|c.live)&bit(offset) != 0 {
		return ErrOrder
	}
	t.pushReady(c, offset, clampRecv(receives))
	t.hi = max(t.hi, offset+1)
	return nil
}

// SetCursor ends a restore: every offset in [Cursor(), cursor) not
// registered by MarkDone or AddReady becomes ready again with receive count
// 0, and the cursor moves to cursor. It returns ErrOrder if cursor is below
// a registered offset + 1 (which includes the current cursor).
func (t *Table) SetCursor(cursor uint64) error {
	if cursor < t.hi {
		return ErrOrder
	}
	for off := t.cursor; off < cursor; {
		k := off >> chunkBits
		end := min(cursor, (k+1)<<chunkBits)
		c := t.dir.extend(k)
		for w := span(off, end) &^ (c.done | c.live); w != 0; {
			var i uint
			i, w = nextBit(w)
			t.pushReady(c, k<<chunkBits|uint64(i), 0)
		}
		off = end
	}
	t.cursor, t.hi = cursor, cursor
	t.advance()
	return nil
}

// pushReady makes unset offset off of chunk c live and ready again.
func (t *Table) pushReady(c *chunk, off uint64, recv uint32) {
	ref := t.attach(c, off, recv)
	t.ready.push(t.slots, entry[uint64]{off, ref})
}

// span returns the chunk bits of offsets [lo, hi), which lie in one chunk
// and are not empty.
func span(lo, hi uint64) uint64 {
	return ^uint64(0) >> (chunkSize - (hi - lo)) << (lo & chunkMask)
}

func clampRecv(n int) uint32 {
	return uint32(min(max(int64(n), 0), math.MaxUint32))
}
