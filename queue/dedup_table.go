package queue

// hashTable maps the 64-bit hashes of dedup ids to offsets: open
// addressing with linear probing, at most half full, and deletion by
// backward shift, so that no tombstone is left behind. The window inserts
// and deletes an id at each send and looks up ids it does not hold at
// each new one; a table that left tombstones (Go's map does, in full
// groups) makes those lookups probe further and further. Key 0 marks an
// empty slot: hashes are stored with their low bit set (see key), which
// costs the hash one bit; the window checks every match against the id in
// the record anyway.
type hashTable struct {
	slots []hashSlot
	n     int
}

type hashSlot struct{ key, val uint64 }

func key(h uint64) uint64 { return h | 1 }

func (t *hashTable) find(k uint64) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := len(t.slots) - 1
	for i := int(k>>1) & mask; ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case k:
			return i, true
		case 0:
			return i, false
		}
	}
}

func (t *hashTable) get(h uint64) (uint64, bool) {
	i, ok := t.find(key(h))
	if !ok {
		return 0, false
	}
	return t.slots[i].val, true
}

func (t *hashTable) put(h, v uint64) {
	k := key(h)
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	i, ok := t.find(k)
	if !ok {
		t.n++
	}
	t.slots[i] = hashSlot{k, v}
}

func (t *hashTable) del(h uint64) {
	if i, ok := t.find(key(h)); ok {
		t.delAt(i)
	}
}

// delIf deletes h when it maps to v, with one probe.
func (t *hashTable) delIf(h, v uint64) {
	if i, ok := t.find(key(h)); ok && t.slots[i].val == v {
		t.delAt(i)
	}
}

// delAt deletes the key at slot i, shifting back the keys after it that
// may move nearer their home slot.
func (t *hashTable) delAt(i int) {
	mask := len(t.slots) - 1
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s.key == 0 {
			break
		}
		// s may move back to i when its home slot is not in (i, j].
		if home := int(s.key>>1) & mask; (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = hashSlot{}
	t.n--
}

func (t *hashTable) len() int { return t.n }

func (t *hashTable) grow() {
	old := t.slots
	t.slots = make([]hashSlot, max(16, 2*len(old)))
	t.n = 0
	for _, s := range old {
		if s.key != 0 {
			i, _ := t.find(s.key)
			t.slots[i] = s
			t.n++
		}
	}
}

// touch reads the home slots of a and b and returns their keys combined:
// the two loads are independent, so that when both miss the cache they
// are fetched at once (see dedupWindow.warmUp).
func (t *hashTable) touch(a, b uint64) uint64 {
	if len(t.slots) == 0 {
		return 0
	}
	mask := len(t.slots) - 1
	return t.slots[int(key(a)>>1)&mask].key ^ t.slots[int(key(b)>>1)&mask].key
}
