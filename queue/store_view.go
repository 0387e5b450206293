package queue

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// sharedLog is one of a Store's shared logs (messages, deletes, receive
// counts): every queue of the store appends to it, each record tagged
// with the `queue` attribute (its queue's id and its offset among that
// queue's records).
type sharedLog struct {
	l *engine.Log
	// wait: the store's policy is SyncAlways, so an append returns once
	// a sync covers it. The log itself runs SyncNone and each appender
	// waits outside its view's lock (WaitDurable), so that the appends of
	// one queue, and of many, share syncs.
	wait bool
}

// holeBit marks an entry of storeView.pos that no record fills: the
// offset was given out, but its record is gone (lost in a power failure,
// damaged, its segment removed). The other bits keep the position of the
// record before it, so that pos stays sorted.
const holeBit = 1 << 63

// storeView is a queue's own log inside one of its store's shared logs:
// the queue's records numbered 0, 1, 2, ... as they would be in a log of
// its own, each mapped to its position in the shared log. The map is in
// memory (8 bytes per record from the view's first offset on), rebuilt at
// the store's open from the records' `queue` attributes, and trimmed as
// the queue's head moves (DropBefore). The shared log's segments are
// removed by the store once no view reaches into them.
//
// A read checks the record's `queue` attribute against the view: a
// record of another queue is never handed out as this queue's.
type storeView struct {
	sh    *sharedLog
	id    uint32
	dirty *atomic.Bool // set by each append: the queue's head may move

	mu    sync.Mutex
	first uint64  // the queue offset of pos entry 0
	pos   posList // shared-log positions of [first, first+pos.len())
	// attrs are an append's attributes, under mu (no allocation per
	// append): between appends, the queue attribute's id alone.
	attrs  engine.Attrs
	closed bool
	// drop caches DropPoint's answer, asked at each delete: it holds
	// while first stays, as the view's first record stays in its shared
	// segment and that segment's end, once a later one begins, is fixed
	// (the records appended later lie past it). fill, which appends
	// holes at earlier positions, forgets it.
	drop struct {
		known     bool
		first, at uint64
	}

	// first and its end, for First and Next without the lock; set with
	// them, under mu (publish).
	firstA, nextA atomic.Uint64
}

// publish makes first and the end seen by First and Next. Called with
// v.mu held after each change.
func (v *storeView) publish() {
	v.firstA.Store(v.first)
	v.nextA.Store(v.first + uint64(v.pos.len()))
}

func newStoreView(sh *sharedLog, id uint32, dirty *atomic.Bool) *storeView {
	return &storeView{sh: sh, id: id, dirty: dirty, attrs: engine.Attrs{HasQueue: true, Queue: id}}
}

// reopen lets a view closed with its Queue take appends again, for the
// queue's next open.
func (v *storeView) reopen() {
	v.mu.Lock()
	v.closed = false
	v.mu.Unlock()
}

// forget closes the view of a deleted queue and lets its records go.
func (v *storeView) forget() {
	v.mu.Lock()
	v.closed = true
	v.first += uint64(v.pos.len())
	v.pos.clear()
	v.publish()
	v.mu.Unlock()
}

// maxViewHoles bounds the run of offsets a view holds as holes at once
// (8 bytes each): records lost in a power failure or with a damaged
// segment leave far fewer. A record of the queue further past the view's
// end, or a skip further, is damage (a foreign record, a forged head).
const maxViewHoles = 1 << 24

// maxQueueOffset bounds a queue's offsets, far below the overflow of
// first+len(pos).
const maxQueueOffset = 1 << 62

// push notes a record found at the store's open: offset off of the queue
// at position p. Offsets skipped on the way are holes. An offset at or
// below one already noted, or too far past the last, is ignored (false).
func (v *storeView) push(off, p uint64) bool {
	next := v.first + uint64(v.pos.len())
	switch {
	case off >= maxQueueOffset:
		return false
	case v.pos.len() == 0 && v.first == 0:
		v.first = off
		v.publish()
	case off < next || off-next > maxViewHoles:
		return false
	}
	v.fill(off)
	v.add(p)
	return true
}

// fill makes the offsets below to holes. Called with v.mu held (or at open).
func (v *storeView) fill(to uint64) {
	last := uint64(0)
	if n := v.pos.len(); n > 0 {
		last = v.pos.at(n-1) &^ holeBit
	}
	v.drop.known = false
	for v.first+uint64(v.pos.len()) < to {
		v.add(last | holeBit)
	}
}

// add appends p to pos. Called with v.mu held (or at open).
func (v *storeView) add(p uint64) {
	v.pos.push(p)
	v.nextA.Store(v.first + uint64(v.pos.len()))
}

// noteAppend marks the queue changed for the store's next checkpoint.
// The flag is read first: it is most often set already, and a load costs
// less than a store, which is a locked exchange on amd64.
func (v *storeView) noteAppend() {
	if !v.dirty.Load() {
		v.dirty.Store(true)
	}
}

func (v *storeView) First() uint64 { return v.firstA.Load() }

func (v *storeView) Next() uint64 { return v.nextA.Load() }

// at returns the shared-log position of off.
func (v *storeView) at(off uint64) (uint64, error) {
	v.mu.Lock()
	first, n := v.first, uint64(v.pos.len())
	var p uint64
	if off >= first && off-first < n {
		p = v.pos.at(int(off - first))
	}
	v.mu.Unlock()
	switch {
	case off < first:
		return 0, fmt.Errorf("%w: offset %d of queue %d lies below its first, %d", engine.ErrTrimmed, off, v.id, first)
	case off-first >= n:
		return 0, fmt.Errorf("%w: offset %d of queue %d: the queue ends at %d", engine.ErrNotFound, off, v.id, first+n)
	case p&holeBit != 0:
		return 0, fmt.Errorf("%w: offset %d of queue %d: its record is lost", engine.ErrNotFound, off, v.id)
	}
	return p, nil
}

func (v *storeView) Read(off uint64) (engine.Record, error) {
	p, err := v.at(off)
	if err != nil {
		return engine.Record{Offset: off}, err
	}
	r, err := v.sh.l.Read(p)
	if err != nil {
		r.Release()
		return engine.Record{Offset: off}, fmt.Errorf("queue %d offset %d: %w", v.id, off, err)
	}
	// The record as the queue's own log would hold it: the queue
	// attribute, checked here, is no attribute of the message.
	if !r.ForQueue(v.id, off) {
		r.Release()
		return engine.Record{Offset: off}, fmt.Errorf("%w: record %d of the store's log is not offset %d of queue %d", engine.ErrCorrupt, p, off, v.id)
	}
	return r, nil
}

// Records yields the view's records from from on; a run of lost
// offsets is yielded once, as an error at its first offset.
func (v *storeView) Records(from uint64) iter.Seq2[engine.Record, error] {
	return func(yield func(engine.Record, error) bool) {
		if first := v.First(); from < first {
			err := fmt.Errorf("%w: offsets [%d, %d) of queue %d", engine.ErrTrimmed, from, first, v.id)
			if !yield(engine.Record{Offset: from}, err) {
				return
			}
			from = first
		}
		hole := false
		for off := from; off < v.Next(); off++ {
			r, err := v.Read(off)
			if err != nil && r.Body == nil && !isCorruptOnly(err) {
				if hole {
					continue
				}
				hole = true
			} else {
				hole = false
			}
			ok := yield(r, err)
			r.Release()
			if !ok {
				return
			}
		}
	}
}

// isCorruptOnly reports whether err is a damaged record rather than a
// missing one.
func isCorruptOnly(err error) bool {
	return errors.Is(err, engine.ErrCorrupt)
}

func (v *storeView) RecordsWithAttrs(from uint64) iter.Seq2[engine.Record, error] {
	return v.Records(from)
}

// OffsetForTime returns the first offset of the view whose record lies
// at or after the shared log's offset for t.
func (v *storeView) OffsetForTime(t time.Time) (uint64, error) {
	p, err := v.sh.l.OffsetForTime(t)
	if err != nil {
		return 0, err
	}
	return v.offsetAt(p), nil
}

// offsetAt returns the first offset of the view whose position is at or
// past p (Next when none is).
func (v *storeView) offsetAt(p uint64) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.offsetAtLocked(p)
}

// offsetAtLocked is offsetAt with v.mu held.
func (v *storeView) offsetAtLocked(p uint64) uint64 {
	lo, hi := 0, v.pos.len()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if v.pos.at(m)&^holeBit < p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return v.first + uint64(lo)
}

func (v *storeView) Append(body []byte) (uint64, error) { return v.AppendWith(body, nil) }

func (v *storeView) AppendWith(body []byte, attrs *engine.Attrs) (uint64, error) {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return 0, fmt.Errorf("queue %d: %w", v.id, engine.ErrClosed)
	}
	a := &v.attrs
	if attrs != nil {
		*a = *attrs
		a.HasQueue, a.Queue = true, v.id
	}
	off := v.first + uint64(v.pos.len())
	a.QueueOffset = off
	p, err := v.sh.l.AppendWith(body, a)
	if attrs != nil {
		*a = engine.Attrs{HasQueue: true, Queue: v.id} // keeps no reference to the caller's ids
	}
	if err == nil {
		v.add(p)
		v.noteAppend()
	}
	v.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if v.sh.wait {
		if err := v.sh.l.WaitDurable(context.Background(), p); err != nil {
			return 0, err
		}
	}
	return off, nil
}

func (v *storeView) AppendBatch(bodies [][]byte, attrs []*engine.Attrs) (uint64, int, error) {
	return v.appendBatch(bodies, attrs, v.sh.wait)
}

// appendBatchNoWait is AppendBatch without the wait for the sync (see
// messageLog).
func (v *storeView) appendBatchNoWait(bodies [][]byte, attrs []*engine.Attrs) (uint64, int, error) {
	return v.appendBatch(bodies, attrs, false)
}

// appendBatch appends as AppendBatch does and, when wait is set, waits
// for the records' sync.
func (v *storeView) appendBatch(bodies [][]byte, attrs []*engine.Attrs, wait bool) (uint64, int, error) {
	as := make([]engine.Attrs, len(bodies))
	ptrs := make([]*engine.Attrs, len(bodies))
	for i := range bodies {
		if i < len(attrs) && attrs[i] != nil {
			as[i] = *attrs[i]
		}
		as[i].HasQueue, as[i].Queue = true, v.id
		ptrs[i] = &as[i]
	}
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return 0, 0, fmt.Errorf("queue %d: %w", v.id, engine.ErrClosed)
	}
	off := v.first + uint64(v.pos.len())
	for i := range as {
		as[i].QueueOffset = off + uint64(i)
	}
	p, n, err := v.sh.l.AppendBatch(bodies, ptrs)
	for i := range n {
		v.add(p + uint64(i))
	}
	if n > 0 {
		v.noteAppend()
	}
	v.mu.Unlock()
	if n > 0 && wait {
		if werr := v.sh.l.WaitDurable(context.Background(), p+uint64(n)-1); werr != nil && err == nil {
			return off, 0, werr
		}
	}
	return off, n, err
}

// Gaps returns the runs of lost offsets at or above from.
func (v *storeView) Gaps(from uint64) [][2]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out [][2]uint64
	n := uint64(v.pos.len())
	for i := max(from, v.first) - v.first; i < n; i++ {
		if v.pos.at(int(i))&holeBit == 0 {
			continue
		}
		j := i
		for j < n && v.pos.at(int(j))&holeBit != 0 {
			j++
		}
		out = append(out, [2]uint64{v.first + i, v.first + j})
		i = j
	}
	return out
}

// SkipTo makes next the view's next offset; the offsets skipped are holes.
func (v *storeView) SkipTo(next uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	end := v.first + uint64(v.pos.len())
	switch {
	case next <= end:
		return nil
	case next >= maxQueueOffset || v.pos.len() > 0 && next-end > maxViewHoles:
		return fmt.Errorf("%w: queue %d cannot skip from %d to %d", engine.ErrCorrupt, v.id, end, next)
	case v.pos.len() == 0:
		v.first = next
		v.publish()
		return nil
	}
	v.fill(next)
	return nil
}

func (v *storeView) Sync() error { return v.sh.l.Sync() }

// Durable returns the first offset whose record is not known synced.
func (v *storeView) Durable() uint64 { return v.offsetAt(v.sh.l.Durable()) }

// WaitDurable blocks until a sync covers the record at off. An offset
// the view dropped since (the queue's head passed it: a checkpoint can run
// between a Delete's append and its wait) has no position any more, but
// its record lies below the shared log's end: it waits for all of that, as
// the engine's WaitDurable does for a record dropped from a log.
func (v *storeView) WaitDurable(ctx context.Context, off uint64) error {
	p, err := v.at(off)
	if errors.Is(err, engine.ErrTrimmed) {
		if n := v.sh.l.Next(); n > 0 {
			return v.sh.l.WaitDurable(ctx, n-1)
		}
	}
	if err != nil {
		return err
	}
	return v.sh.l.WaitDurable(ctx, p)
}

// DropPoint returns the first offset of the view past the shared segment
// that holds its first record: the head must reach it for that segment
// to be free of this queue.
func (v *storeView) DropPoint() (uint64, bool) {
	if _, _, _, n := v.sh.l.SegmentOf(0); n < 2 {
		return 0, false // see oldestSegment
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.drop.known && v.drop.first == v.first {
		return v.drop.at, true
	}
	p, ok := v.lowLocked()
	if !ok {
		return 0, false
	}
	_, end, i, n := v.sh.l.SegmentOf(p)
	if n-i < 2 {
		return 0, false // its segment is the newest: its end is not known
	}
	b1 := v.offsetAtLocked(end)
	v.drop.known, v.drop.first, v.drop.at = true, v.first, b1
	return b1, true
}

// DropBefore forgets the view's records below off. The shared log's
// segments go when no view of the store reaches into them (Store).
func (v *storeView) DropBefore(off uint64) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if off <= v.first {
		return 0, nil
	}
	k := min(off-v.first, uint64(v.pos.len()))
	v.pos.dropFront(int(k))
	v.first += k
	v.publish()
	return 0, nil
}

// low returns the shared position of the view's first record, ok false
// when it holds none.
func (v *storeView) low() (p uint64, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lowLocked()
}

// lowLocked is low with v.mu held.
func (v *storeView) lowLocked() (p uint64, ok bool) {
	for i := range v.pos.len() {
		if p = v.pos.at(i); p&holeBit == 0 {
			return p, true
		}
	}
	return 0, false
}

func (v *storeView) ReleaseSpares() int        { return 0 }
func (v *storeView) MaxRecordBytes() int       { return v.sh.l.MaxRecordBytes() }
func (v *storeView) SegmentBytes() int64       { return v.sh.l.SegmentBytes() }
func (v *storeView) Recovery() engine.Recovery { return v.sh.l.Recovery() }
func (v *storeView) Stats() engine.LogStats    { return v.sh.l.Stats() }
func (v *storeView) segments() int             { _, _, i, n := v.segmentOfFirst(); return n - i }
func (v *storeView) Close() error              { v.close(); return nil }
func (v *storeView) close()                    { v.mu.Lock(); v.closed = true; v.mu.Unlock() }
func (v *storeView) segmentOfFirst() (base, end uint64, i, n int) {
	p, ok := v.low()
	if !ok {
		return 0, 0, 0, 0
	}
	return v.sh.l.SegmentOf(p)
}

// oldestSegment returns the offsets of the view's records that begin
// the shared segment holding its first record and the one after it.
func (v *storeView) oldestSegment() (b0, b1 uint64, ok bool) {
	if _, _, _, n := v.sh.l.SegmentOf(0); n < 2 {
		// One segment: nothing to drop (the common case of a queue whose
		// head follows its end, asked at each delete), without the lock.
		return 0, 0, false
	}
	_, end, i, n := v.segmentOfFirst()
	if n-i < 2 {
		return 0, 0, false
	}
	return v.First(), v.offsetAt(end), true
}

// moveLimit measures the oldest segment by the shared log's records in
// it, every queue's: the queue's own records there are few however
// sparse the segment is for it.
func (v *storeView) moveLimit(b0, b1 uint64) int {
	p, ok := v.low()
	if !ok {
		return moveLimit(b0, b1)
	}
	base, end, _, _ := v.sh.l.SegmentOf(p)
	return moveLimit(base, max(base, end))
}
