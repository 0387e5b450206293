package queue

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// dedupWindow remembers the DedupIDs sent within Options.DedupWindow: the
// offset of each one's first send and when it expires. It survives a
// restart because the ids are in the records' attributes: Open rebuilds it
// from the end of the log (see rebuild), and the head checkpoint never
// removes a segment that holds a remembered id's record.
//
// The window may hold a million ids (the default 5 minutes at a few
// thousand sends a second), so it keeps no string per id: ids maps a
// 64-bit hash of each id (maphash, seeded per window) to its first
// send's offset, and order holds (offset, expiry, hash) triples, neither
// with a pointer for the garbage collector to follow. A hash that matches
// is checked against the id in the record at its offset (see match), so
// that two ids with one hash are never taken for one: the later one is
// kept by its string in few, which holds no more than such collisions.
type dedupWindow struct {
	mu     sync.Mutex
	done   sync.Cond              // on mu: a first send of an id ended
	window int64                  // ns
	hash   func(id string) uint64 // maphash.String with a seed of the window's
	ids    hashTable              // hash of an id -> its first send's offset, or sending
	few    map[string]uint64      // ids whose hash another remembered id has
	// order holds the ids by offset from order[head] on, for expiry and
	// the lowest offset held. Expiry moves head; the slots before it are
	// given back when they are more than half of order (see expire).
	order []dedupRef
	head  int
}

// dedupHashForTests, when set, is the hash of every window opened: a test
// that makes ids collide sets it (never in parallel with other tests).
var dedupHashForTests func(id string) uint64

// sending is the offset of an id whose first send is under way (no
// message has it: offsets stay below MaxUint64).
const sending = math.MaxUint64

type dedupRef struct {
	off uint64
	exp int64
	h   uint64 // the id's hash
}

func newDedupWindow(window time.Duration) *dedupWindow {
	seed := maphash.MakeSeed()
	d := &dedupWindow{window: int64(window),
		hash: func(id string) uint64 { return maphash.String(seed, id) }}
	if dedupHashForTests != nil {
		d.hash = dedupHashForTests
	}
	d.done.L = &d.mu
	return d
}

// expire forgets the ids whose time has come. The order is by offset, and
// expiry times grow with it up to the few sends that overlapped: an id
// may be remembered a little longer, never shorter. Each expired id costs
// O(1): the head moves past it, and the live refs are copied to the front
// only once the expired slots outnumber them, so each ref is copied at
// most once per id expired after it. Called with d.mu held.
func (d *dedupWindow) expire(now int64) {
	k := d.head
	for k < len(d.order) && d.order[k].exp <= now {
		r := d.order[k]
		d.ids.delIf(r.h, r.off)
		if len(d.few) > 0 {
			d.forgetFew(r.off)
		}
		k++
	}
	d.head = k
	switch live := len(d.order) - k; {
	case live == 0:
		d.order, d.head = d.order[:0], 0
		if cap(d.order) > 4096 {
			d.order = nil
		}
	case k > live:
		copy(d.order, d.order[k:])
		d.order, d.head = d.order[:live], 0
	}
}

// forgetFew forgets the colliding id whose first send is off.
func (d *dedupWindow) forgetFew(off uint64) {
	for id, o := range d.few {
		if o == off {
			delete(d.few, id)
			return
		}
	}
}

// remember records that id (of hash h) got offset off, to be forgotten at
// exp; inFew when another id holds h. Called with d.mu held.
func (d *dedupWindow) remember(id string, h, off uint64, exp int64, inFew bool) {
	d.set(id, h, off, inFew)
	i := len(d.order)
	d.order = append(d.order, dedupRef{})
	for i > d.head && d.order[i-1].off > off {
		d.order[i] = d.order[i-1]
		i--
	}
	d.order[i] = dedupRef{off: off, exp: exp, h: h}
}

// set maps id (of hash h) to off: in few when inFew, by its hash
// otherwise. Called with d.mu held.
func (d *dedupWindow) set(id string, h, off uint64, inFew bool) {
	if !inFew {
		d.ids.put(h, off)
		return
	}
	if d.few == nil {
		d.few = map[string]uint64{}
	}
	d.few[id] = off
}

// unset forgets id (of hash h), set with inFew. Called with d.mu held.
func (d *dedupWindow) unset(id string, h uint64, inFew bool) {
	if inFew {
		delete(d.few, id)
	} else {
		d.ids.del(h)
	}
}

// holdsOther reports whether h is held by an id other than id, which find
// did not find. Called with d.mu held.
func (d *dedupWindow) holdsOther(h uint64) bool {
	_, ok := d.ids.get(h)
	return ok
}

// low returns the lowest offset whose id is remembered, ok false when none.
func (d *dedupWindow) low(now int64) (uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire(now)
	if d.head == len(d.order) {
		return 0, false
	}
	return d.order[d.head].off, true
}

// size returns how many ids are remembered.
func (d *dedupWindow) size(now int64) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire(now)
	return d.ids.len() + len(d.few)
}

// find returns the offset of id's first send within the window (sending
// while it is under way), ok false when id is not remembered. A hash that
// matches counts only when the record at its offset carries id (read
// from the log, the rare case of a send repeated). Called with d.mu held.
func (d *dedupWindow) find(l recordLog, id string, h uint64) (uint64, bool) {
	if off, ok := d.few[id]; ok {
		return off, true
	}
	off, ok := d.ids.get(h)
	if !ok || off == sending || recordHasDedup(l, off, id) {
		return off, ok
	}
	return 0, false // another id of the same hash
}

// recordHasDedup reports whether the record at off carries the dedup id
// id. A record that cannot be read is taken to carry it: the hash matched,
// and a read error is no proof of another id (the window kept such
// records before hashes, and a send repeated is the likely case).
func recordHasDedup(l recordLog, off uint64, id string) bool {
	r, err := l.Read(off)
	if err != nil {
		return true
	}
	defer r.Release()
	a, err := r.Attrs()
	return err != nil || string(a.Dedup) == id
}

// sendDedup sends body with attrs a (whose Dedup is id) unless id was sent
// within the window: then it returns the first offset. Concurrent sends of
// one id append once: the later ones wait for the first.
func (q *Queue) sendDedup(body []byte, a *engine.Attrs, id string) (uint64, error) {
	d := q.dedup
	h := d.hash(id)
	d.mu.Lock()
	for {
		if q.closed.Load() {
			d.mu.Unlock()
			return 0, engine.ErrClosed // not the first offset, as if sent
		}
		now := q.now()
		d.expire(now)
		first, ok := d.find(q.log, id, h)
		if !ok {
			inFew := d.holdsOther(h) // a collision: this id goes to few
			d.set(id, h, sending, inFew)
			d.mu.Unlock()
			off, err := q.appendOne(body, a)
			d.mu.Lock()
			if err != nil {
				d.unset(id, h, inFew)
			} else {
				d.remember(id, h, off, addSat(now, d.window), inFew)
			}
			d.done.Broadcast()
			d.mu.Unlock()
			return off, err
		}
		if first != sending {
			d.mu.Unlock()
			return first, nil
		}
		d.done.Wait() // a first send ended, maybe this id's: look again
	}
}

// rebuild fills the window from the records of the last DedupWindow, at
// open. The log keeps no time per record, only the time index (one entry
// per IndexIntervalBytes, stamped by the system clock at append): a record
// between two entries counts as the younger one, and one after the newest
// entry as appended now, so that an id is remembered at least as long as
// it should be, never shorter. The index is probed at dedupProbes times
// across the window, so a record may count as up to window/dedupProbes
// younger still. Ages are measured on the system clock and counted from
// the queue's now.
func (q *Queue) rebuildDedup() error {
	d := q.dedup
	real := time.Now()
	from := real.Add(-time.Duration(d.window))
	start, err := q.log.OffsetForTime(from)
	if err != nil || start >= q.log.Next() {
		return err
	}
	// probe[k] is the first offset that may have been appended at or after
	// times[k]: a record below it is older than times[k]. The index is
	// asked only once a record with an id turns up (most queues have
	// none).
	var times []time.Time
	var probe []uint64
	probed := false
	probeTimes := func() error {
		probed = true
		step := max(time.Duration(d.window)/dedupProbes, time.Millisecond)
		for t := from.Add(step); t.Before(real); t = t.Add(step) {
			p, err := q.log.OffsetForTime(t)
			if err != nil {
				return err
			}
			times, probe = append(times, t), append(probe, p)
		}
		return nil
	}
	now := q.now()
	k := 0
	for r, err := range q.log.RecordsWithAttrs(start) {
		if err != nil {
			continue // damaged or dropped: nothing to remember
		}
		a, err := r.Attrs()
		if err != nil || a.Dedup == nil || a.HasMoved || a.HasOrigin {
			// A moved message's id was forgotten before its move; a
			// dead letter keeps its id, but no send with it came here.
			continue
		}
		if !probed {
			if err := probeTimes(); err != nil {
				return err
			}
		}
		for k < len(probe) && r.Offset >= probe[k] {
			k++
		}
		young := real // after the last probe: counts as now
		if k < len(probe) {
			young = times[k]
		}
		exp := addSat(now, d.window-int64(real.Sub(young)))
		if exp <= now {
			continue
		}
		id := string(a.Dedup)
		h := d.hash(id)
		off, same := d.find(q.log, id, h)
		if same && off > r.Offset {
			continue
		}
		// A later send of the id replaces an earlier one, where it is.
		_, inFew := d.few[id]
		d.remember(id, h, r.Offset, exp, inFew || !same && d.holdsOther(h))
	}
	q.recovery.DedupIDs = d.ids.len() + len(d.few)
	return nil
}

// dedupProbes is how many times the time index is asked while the window
// is rebuilt.
const dedupProbes = 1024
