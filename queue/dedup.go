package queue

import (
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
	window int64 // ns
	ids    map[string]*dedupEntry
	order  []dedupRef // by offset, for expiry and the lowest offset held
}

type dedupEntry struct {
	off     uint64
	exp     int64         // queue time when it is forgotten
	pending chan struct{} // closed when the first send is done; nil then
}

type dedupRef struct {
	off uint64
	exp int64
	id  string
}

func newDedupWindow(window time.Duration) *dedupWindow {
	return &dedupWindow{window: int64(window), ids: map[string]*dedupEntry{}}
}

// expire forgets the ids whose time has come. The order is by offset, and
// expiry times grow with it up to the few sends that overlapped: an id
// may be remembered a little longer, never shorter. Called with d.mu held.
func (d *dedupWindow) expire(now int64) {
	k := 0
	for k < len(d.order) && d.order[k].exp <= now {
		r := d.order[k]
		if e, ok := d.ids[r.id]; ok && e.off == r.off && e.pending == nil {
			delete(d.ids, r.id)
		}
		k++
	}
	if k > 0 {
		d.order = append(d.order[:0], d.order[k:]...)
		if len(d.order) == 0 && cap(d.order) > 4096 {
			d.order = nil
		}
	}
}

// remember records that id's first send got offset off at now. Called with
// d.mu held.
func (d *dedupWindow) remember(id string, off uint64, exp int64) {
	d.ids[id] = &dedupEntry{off: off, exp: exp}
	i := len(d.order)
	d.order = append(d.order, dedupRef{})
	for i > 0 && d.order[i-1].off > off {
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
	if len(d.order) == 0 {
		return 0, false
	}
	return d.order[0].off, true
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
	for {
		now := q.now()
		d.mu.Lock()
		d.expire(now)
		e, ok := d.ids[id]
		if !ok {
			e = &dedupEntry{pending: make(chan struct{})}
			d.ids[id] = e
			d.mu.Unlock()
			off, err := q.appendOne(body, a)
			d.mu.Lock()
			if err != nil {
				delete(d.ids, id)
			} else {
				d.remember(id, off, addSat(now, d.window))
			}
			close(e.pending)
			d.mu.Unlock()
			return off, err
		}
		if e.pending == nil {
			d.mu.Unlock()
			return e.off, nil
		}
		ch := e.pending
		d.mu.Unlock()
		<-ch // the first send ended: look again
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
		if err != nil || a.Dedup == nil || a.HasMoved {
			continue // a moved message's id was forgotten before its move
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
		if e, ok := d.ids[id]; ok && e.off > r.Offset {
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
