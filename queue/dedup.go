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
// send's offset, and ring holds (offset, expiry, hash) triples, neither
// with a pointer for the garbage collector to follow. A hash that matches
// is checked against the id in the record at its offset (see find), so
// that two ids with one hash are never taken for one: the later one is
// kept by its string in few, which holds no more than such collisions.
type dedupWindow struct {
	mu     sync.Mutex
	done   sync.Cond              // on mu: a first send of an id ended
	window int64                  // ns
	hash   func(id string) uint64 // maphash.String with a seed of the window's
	ids    hashTable              // hash of an id -> its first send's offset, or sending
	few    map[string]uint64      // ids whose hash another remembered id has
	// ring holds the ids by offset, for expiry and the lowest offset held:
	// the refs from head to tail (counters, taken modulo len(ring), a
	// power of two). Expiry moves head; a send adds at tail. No ref moves
	// but to keep the order by offset (sends that overlapped) and when
	// the ring is resized (see push and expire).
	ring       []dedupRef
	head, tail uint64
	warm       uint64 // what warmUp read (kept, so that its loads are made)
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

// expire forgets the ids whose time has come. The ring is by offset, and
// expiry times grow with it up to the few sends that overlapped: an id
// may be remembered a little longer, never shorter. Each expired id costs
// O(1): the head moves past it. A ring less than a quarter full is
// halved or less (O(1) amortized too: at least a quarter of its refs
// expired since it was last resized). Called with d.mu held.
func (d *dedupWindow) expire(now int64) {
	for d.head < d.tail {
		r := d.at(d.head)
		if r.exp > now {
			break
		}
		d.ids.delIf(r.h, r.off)
		if len(d.few) > 0 {
			d.forgetFew(r.off)
		}
		d.head++
	}
	if live := d.tail - d.head; len(d.ring) > minDedupRing && live < uint64(len(d.ring)/4) {
		d.resize(max(minDedupRing, 2*pow2AtLeast(int(live))))
	}
}

// minDedupRing is the fewest refs a ring that was used keeps room for.
const minDedupRing = 1024

// at returns the ring's ref at counter i.
func (d *dedupWindow) at(i uint64) *dedupRef {
	return &d.ring[i&uint64(len(d.ring)-1)]
}

// push adds the ref of an id sent at off, expiring at exp, keeping the
// ring in offset order: a send that overlapped a later one (which got a
// higher offset but took d.mu first) goes before it.
func (d *dedupWindow) push(off uint64, exp int64, h uint64) {
	if d.tail-d.head == uint64(len(d.ring)) {
		d.resize(max(16, 2*len(d.ring)))
	}
	i := d.tail
	d.tail++
	for i > d.head && d.at(i-1).off > off {
		*d.at(i) = *d.at(i - 1)
		i--
	}
	*d.at(i) = dedupRef{off: off, exp: exp, h: h}
}

// resize moves the live refs to a ring of n (a power of two, at least
// as many as they are).
func (d *dedupWindow) resize(n int) {
	ring := make([]dedupRef, n)
	for i := d.head; i < d.tail; i++ {
		ring[i-d.head] = *d.at(i)
	}
	d.ring, d.tail, d.head = ring, d.tail-d.head, 0
}

// pow2AtLeast returns the least power of two at least n (1 for n <= 1).
func pow2AtLeast(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// warmUp reads the slots of the table where the lookup of h and the
// deletion of the next id to expire (if its time has come) begin, one
// beside the other, so that the processor fetches them at once: in a
// window of a million ids each is a miss of the cache, and the lookup
// and the deletion that follow would otherwise wait for them one after
// the other. Called with d.mu held.
func (d *dedupWindow) warmUp(h uint64, now int64) {
	if d.head < d.tail {
		if r := d.at(d.head); r.exp <= now {
			d.warm = d.ids.touch(h, r.h)
		}
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
	d.push(off, exp, h)
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
	if d.head == d.tail {
		return 0, false
	}
	return d.at(d.head).off, true
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
// one id append once: the later ones wait for the first. now is the
// queue's time when the send began (the time its attributes were made
// at): the window is counted from it.
func (q *Queue) sendDedup(body []byte, a *engine.Attrs, id string, now int64) (uint64, error) {
	d := q.dedup
	h := d.hash(id)
	d.mu.Lock()
	for waited := false; ; waited = true {
		if q.closed.Load() {
			d.mu.Unlock()
			return 0, engine.ErrClosed // not the first offset, as if sent
		}
		if waited {
			now = q.now()
		}
		d.warmUp(h, now)
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
