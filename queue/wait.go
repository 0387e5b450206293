package queue

import (
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

// expire moves the messages whose deadline is <= now to the ready-again
// list and wakes as many receivers. Called with q.mu held.
func (q *Queue) expire(now int64) {
	if k := q.t.Expire(now); k > 0 {
		q.waiters.wake(k)
	}
}

// armTimer makes sure a timer will fire at or before the earliest deadline.
// A timer set for a later time is replaced; one set earlier is kept (it
// finds nothing to expire and sets the next one), so that the common case,
// deadlines handed out in increasing order, sets one timer per Visibility.
// Called with q.mu held.
func (q *Queue) armTimer(now int64) {
	next, ok := q.t.NextDeadline()
	if !ok || (q.timer != nil && q.timerAt <= next) {
		return
	}
	q.stopTimer()
	gen := q.timerGen
	q.timerAt = next
	q.timer = q.clock.AfterFunc(time.Duration(max(next-now, 0)), func() { q.onTimer(gen) })
}

// stopTimer stops the deadline timer; a call already on its way is ignored
// by its generation. Called with q.mu held.
func (q *Queue) stopTimer() {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	q.timerGen++
}

// onTimer expires the deadlines that have passed, wakes receivers for
// them, and sets the timer for the next deadline.
func (q *Queue) onTimer(gen uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() || gen != q.timerGen {
		return
	}
	q.timer = nil
	q.timerGen++
	now := q.clock.Now().UnixNano()
	q.expire(now)
	q.armTimer(now)
}
