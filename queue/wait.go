package queue

import (
	"github.com/pagelog/pagelog/engine"
	"slices"
	"time"
)

// Clock is a Queue's source of time: deadlines are Now() + Visibility, and
// the queue sleeps with AfterFunc until the earliest deadline and between
// head checkpoints. Options.Clock nil means the system clock; tests of
// code built on a queue can pass a ManualClock and move time themselves.
type Clock interface {
	Now() time.Time
	// AfterFunc arranges for f to be called once d has passed, unless the
	// returned Timer is stopped first. f must not be called while
	// AfterFunc runs: the queue holds a lock then that f takes.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a call pending in a Clock. *time.Timer implements it.
type Timer interface {
	Stop() bool
}

// systemClock is the Clock of the time package.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// waitList holds the receivers blocked in Receive, oldest first. Each
// waits on its own channel of capacity 1; waking one sends it a token and
// forgets it. Guarded by Queue.mu.
type waitList struct {
	w []chan struct{}
}

// add registers a new waiter.
func (l *waitList) add() chan struct{} {
	ch := make(chan struct{}, 1)
	l.w = append(l.w, ch)
	return ch
}

// wake wakes the n oldest waiters (fewer if fewer wait).
func (l *waitList) wake(n int) {
	n = min(n, len(l.w))
	for _, ch := range l.w[:n] {
		ch <- struct{}{}
	}
	clear(l.w[:n])
	l.w = l.w[n:]
	if len(l.w) == 0 {
		l.w = l.w[:0:0] // let the backing array go; keeps the slice from creeping
	}
}

// wakeAll wakes every waiter.
func (l *waitList) wakeAll() { l.wake(len(l.w)) }

// remove forgets a waiter; it reports false if the waiter was already woken.
func (l *waitList) remove(ch chan struct{}) bool {
	i := slices.Index(l.w, ch)
	if i < 0 {
		return false
	}
	l.w = slices.Delete(l.w, i, i+1)
	return true
}

// cancelWait forgets a receiver whose ctx ended. A wake-up it got in the
// meantime is passed on, so that no ready message is left with a sleeping
// receiver.
func (q *Queue) cancelWait(ch chan struct{}) {
	q.mu.Lock()
	if !q.waiters.remove(ch) {
		q.waiters.wake(1)
	}
	q.mu.Unlock()
}

// armTimer makes sure a timer will fire at or before the earliest
// deadline or due time, the earliest pinned body's deadline, and at once
// (or at the retry time, after a failed move) when moves to the dead
// letters wait. A timer set for a later time is replaced; one set earlier
// is kept (it finds nothing to do and sets the next one), so that the
// common case, deadlines handed out in increasing order, sets one timer
// per Visibility. Called with q.mu held.
func (q *Queue) armTimer(now int64) {
	next, ok := q.es.next()
	if p, pinned := q.pins.next(); pinned && (!ok || p < next) {
		next, ok = p, true
	}
	if len(q.dying) > 0 && q.dead != nil {
		if r := max(now, q.retryAt); !ok || r < next {
			next, ok = r, true
		}
	}
	if !ok || q.closed.Load() || (q.timer != nil && q.timerAt <= next) {
		return
	}
	q.stopTimer()
	gen := q.timerGen
	q.timerAt = next
	q.timer = q.clock.AfterFunc(time.Duration(max(next-now, 0)), func() { q.onTimer(gen) }) // next >= now: no overflow
}

// stopTimer stops the timer; a call already on its way is ignored by its
// generation. Called with q.mu held.
func (q *Queue) stopTimer() {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	q.timerGen++
}

// onTimer expires the deadlines and due times that have passed, wakes
// receivers for them, sets the timer for the next one, and runs the moves
// to the dead letters that are due.
func (q *Queue) onTimer(gen uint64) {
	q.mu.Lock()
	if q.closed.Load() || gen != q.timerGen {
		q.mu.Unlock()
		return
	}
	q.timer = nil
	q.timerGen++
	now := q.now()
	q.expire(now)
	var batch []moveItem
	if now >= q.retryAt {
		batch = q.takeDying(false)
	}
	q.armTimer(now)
	q.mu.Unlock()
	if batch != nil {
		q.runMoves(batch)
	}
}

// now is the queue's time: nanoseconds since it was opened, by the Clock.
// With the system clock the difference is taken on Go's monotonic clock, so
// a step of the wall clock neither delays nor hastens a deadline; and only
// the monotonic clock is read (time.Since), not the wall clock as well
// (time.Now): each read costs about 30 ns on the project's machine.
func (q *Queue) now() int64 {
	if _, ok := q.clock.(systemClock); ok {
		return int64(time.Since(q.epoch))
	}
	return int64(q.clock.Now().Sub(q.epoch))
}

// wallTime turns a time of the queue's into a time.Time.
func (q *Queue) wallTime(t int64) time.Time { return q.epoch.Add(time.Duration(t)) }

// pins keep the segments of handed-out bodies mapped until each hand-out's
// deadline, whatever happens to the message meanwhile (a late Delete by
// another receiver included). One pin per segment, not per hand-out: the
// first hand-out from a segment keeps its record, and later ones only move
// that pin's deadline on (a heap keyed by deadline, found by segment), so
// a queue handing out millions of messages per Visibility holds a few
// entries, not millions. Guarded by Queue.mu. The queue's log only drops
// segments from the front, so a base offset names one segment for good.
type pins struct {
	h     []pinned // a min-heap by deadline
	bySeg map[uint64]int
}

type pinned struct {
	deadline int64
	seg      uint64
	rec      engine.Record
}

// push keeps r's segment until deadline at least. r is kept, or released
// at once when its segment is pinned already.
func (p *pins) push(deadline int64, r engine.Record) {
	seg, ok := r.Segment()
	if !ok {
		return
	}
	if k, ok := p.bySeg[seg]; ok {
		r.Release()
		if deadline > p.h[k].deadline {
			p.h[k].deadline = deadline
			p.down(k)
		}
		return
	}
	if p.bySeg == nil {
		p.bySeg = map[uint64]int{}
	}
	p.h = append(p.h, pinned{deadline, seg, r})
	k := len(p.h) - 1
	p.bySeg[seg] = k
	p.up(k)
}

// extend moves the deadline of seg's pin on to deadline, if seg is pinned
// and its deadline is earlier. A hand-out in flight keeps its segment
// pinned, so seg is pinned when a hand-out's deadline is extended.
func (p *pins) extend(seg uint64, deadline int64) {
	if k, ok := p.bySeg[seg]; ok && deadline > p.h[k].deadline {
		p.h[k].deadline = deadline
		p.down(k)
	}
}

// next returns the earliest deadline, ok false when nothing is pinned.
func (p *pins) next() (int64, bool) {
	if len(p.h) == 0 {
		return 0, false
	}
	return p.h[0].deadline, true
}

// releaseUntil releases the segments whose deadline is at or before now.
func (p *pins) releaseUntil(now int64) {
	for len(p.h) > 0 && p.h[0].deadline <= now {
		top := p.h[0]
		last := len(p.h) - 1
		p.swap(0, last)
		p.h[last] = pinned{}
		p.h = p.h[:last]
		delete(p.bySeg, top.seg)
		p.down(0)
		top.rec.Release()
	}
}

// releaseAll releases every segment (Close).
func (p *pins) releaseAll() {
	for _, x := range p.h {
		x.rec.Release()
	}
	p.h, p.bySeg = nil, nil
}

func (p *pins) swap(i, j int) {
	p.h[i], p.h[j] = p.h[j], p.h[i]
	p.bySeg[p.h[i].seg], p.bySeg[p.h[j].seg] = i, j
}

func (p *pins) up(i int) {
	for i > 0 {
		up := (i - 1) / 2
		if p.h[up].deadline <= p.h[i].deadline {
			return
		}
		p.swap(up, i)
		i = up
	}
}

func (p *pins) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(p.h) {
			return
		}
		if c+1 < len(p.h) && p.h[c+1].deadline < p.h[c].deadline {
			c++
		}
		if p.h[i].deadline <= p.h[c].deadline {
			return
		}
		p.swap(i, c)
		i = c
	}
}
