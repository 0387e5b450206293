package inflight

import "fmt"

// check verifies the table's internal invariants; tests call it after
// every operation. It costs O(covered range + live messages).
func (t *Table) check() error {
	if t.head > t.cursor || t.cursor > t.hi {
		return fmt.Errorf("head %d cursor %d hi %d out of order", t.head, t.cursor, t.hi)
	}
	if t.dir.base != t.head>>chunkBits {
		return fmt.Errorf("ring base %d, head chunk %d", t.dir.base, t.head>>chunkBits)
	}
	if err := t.checkChunks(); err != nil {
		return err
	}
	if err := checkHeap(t, &t.flight, false); err != nil {
		return fmt.Errorf("in-flight heap: %w", err)
	}
	if err := checkHeap(t, &t.ready, true); err != nil {
		return fmt.Errorf("ready heap: %w", err)
	}
	return nil
}

// checkChunks verifies the per-offset bitmaps and the block bookkeeping.
func (t *Table) checkChunks() error {
	used := map[int32]bool{}
	live := 0
	for k := t.dir.base; k < t.dir.end(); k++ {
		if end := t.dir.gapEnd(k); end != 0 {
			k = end - 1
			continue
		}
		c := t.dir.at(k)
		if c.done&c.live != 0 {
			return fmt.Errorf("chunk %d: done and live %#x", k, c.done&c.live)
		}
		if (c.blk != 0) != (c.live != 0) {
			return fmt.Errorf("chunk %d: block %d, live %#x", k, c.blk, c.live)
		}
		if c.blk != 0 {
			if used[c.blk-1] || t.owner[c.blk-1] != k {
				return fmt.Errorf("chunk %d: block %d shared or owned by %d", k, c.blk-1, t.owner[c.blk-1])
			}
			used[c.blk-1] = true
		}
		for j := range uint64(chunkSize) {
			if err := t.checkOffset(k<<chunkBits|j, c); err != nil {
				return err
			}
			if c.live&(1<<j) != 0 {
				live++
			}
		}
	}
	if live != t.Len() {
		return fmt.Errorf("%d live bits, %d heap entries", live, t.Len())
	}
	for _, b := range t.free {
		if used[b] {
			return fmt.Errorf("block %d both free and used", b)
		}
		used[b] = true
	}
	if len(used) != len(t.owner) || len(t.slots) != len(t.owner)*chunkSize {
		return fmt.Errorf("%d blocks accounted for, %d owned, %d slots", len(used), len(t.owner), len(t.slots))
	}
	return nil
}

// checkOffset verifies one offset's bits against head, cursor and hi.
func (t *Table) checkOffset(off uint64, c *chunk) error {
	b := bit(off)
	switch {
	case off < t.head && c.live&b != 0:
		return fmt.Errorf("offset %d below head %d is live", off, t.head)
	case off >= t.head && off < t.cursor && (c.done|c.live)&b == 0:
		return fmt.Errorf("offset %d below cursor %d is unset", off, t.cursor)
	case off >= t.hi && (c.done|c.live)&b != 0:
		return fmt.Errorf("offset %d at or above hi %d is set", off, t.hi)
	case off == t.head && off < t.cursor && c.done&b != 0:
		return fmt.Errorf("head %d is done", off)
	}
	return nil
}

// checkHeap verifies the heap order and the slots' back-pointers.
func checkHeap[K key](t *Table, h *heap[K], ready bool) error {
	for i, e := range h.e {
		if i > 0 && h.e[(i-1)/2].key > e.key {
			return fmt.Errorf("entry %d: key below its parent's", i)
		}
		s := t.slots[e.ref]
		if (s.pos < 0) != ready || h.index(s.pos) != i {
			return fmt.Errorf("entry %d: slot %d has pos %d", i, e.ref, s.pos)
		}
		off := t.offsetOf(e.ref)
		c := t.dir.at(off >> chunkBits)
		if c == nil || c.live&bit(off) == 0 || t.ref(c, off) != e.ref {
			return fmt.Errorf("entry %d: offset %d not live in its chunk", i, off)
		}
		if ready && uint64(e.key) != off {
			return fmt.Errorf("entry %d: key %d, offset %d", i, e.key, off)
		}
	}
	return nil
}
