package queue

import (
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
type dedupWindow struct {
	mu     sync.Mutex
	done   sync.Cond         // on mu: a first send of an id ended
	window int64             // ns
	ids    map[string]uint64 // id -> its first send's offset, or sending
	// order holds the ids by offset from order[head] on, for expiry and
	// the lowest offset held. Expiry moves head; the slots before it are
	// given back when they are more than half of order (see expire).
	order []dedupRef
	head  int
}

// sending is the offset of an id whose first send is under way (no
// message has it: offsets stay below MaxUint64).
const sending = math.MaxUint64

type dedupRef struct {
	off uint64
	exp int64
	id  string
}

func newDedupWindow(window time.Duration) *dedupWindow {
	d := &dedupWindow{window: int64(window), ids: map[string]uint64{}}
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
		if off, ok := d.ids[r.id]; ok && off == r.off {
			delete(d.ids, r.id)
		}
		d.order[k] = dedupRef{} // the id's string may go
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
		clear(d.order[live:])
		d.order, d.head = d.order[:live], 0
	}
}

// remember records that id's first send got offset off, to be forgotten
// at exp. Called with d.mu held.
func (d *dedupWindow) remember(id string, off uint64, exp int64) {
	d.ids[id] = off
	i := len(d.order)
	d.order = append(d.order, dedupRef{})
	for i > d.head && d.order[i-1].off > off {
		d.order[i] = d.order[i-1]
		i--
	}
	d.order[i] = dedupRef{off: off, exp: exp, id: id}
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
	return len(d.ids)
}

// sendDedup sends body with attrs a (whose Dedup is id) unless id was sent
// within the window: then it returns the first send's offset. Concurrent
// sends of one id append once: the later ones wait for the first.
func (q *Queue) sendDedup(body []byte, a *engine.Attrs, id string) (uint64, error) {
	d := q.dedup
	d.mu.Lock()
	for {
		if q.closed.Load() {
			d.mu.Unlock()
			return 0, engine.ErrClosed // not the first offset, as if sent
		}
		now := q.now()
		d.expire(now)
		first, ok := d.ids[id]
		if !ok {
			d.ids[id] = sending
			d.mu.Unlock()
			off, err := q.appendOne(body, a)
			d.mu.Lock()
			if err != nil {
				delete(d.ids, id)
			} else {
				d.remember(id, off, addSat(now, d.window))
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
	// times[k]: a record below it is older than times[k].
	step := max(time.Duration(d.window)/dedupProbes, time.Millisecond)
	var times []time.Time
	var probe []uint64
	for t := from.Add(step); t.Before(real); t = t.Add(step) {
		p, err := q.log.OffsetForTime(t)
		if err != nil {
			return err
		}
		times, probe = append(times, t), append(probe, p)
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
		if off, ok := d.ids[id]; ok && off > r.Offset {
			continue
		}
		d.remember(id, r.Offset, exp) // a later send of the id replaces an earlier one
	}
	q.recovery.DedupIDs = len(d.ids)
	return nil
}

// dedupProbes is how many times the time index is asked while the window
// is rebuilt.
const dedupProbes = 1024
