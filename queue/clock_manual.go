package queue

import (
	"slices"
	"sync"
	"time"
)

// ManualClock is a Clock whose time moves only when Advance is called, for
// tests of code built on a Queue: Advance runs the timers that come due (a
// queue's deadline expiries), in order, on the caller's goroutine.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c    *ManualClock
	at   time.Time
	f    func()
	done bool // stopped or fired; guarded by c.mu
}

// NewManualClock returns a ManualClock that reads start until advanced.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arranges for f to run when Advance moves the clock d past now.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop keeps the timer from firing; it reports whether it had not yet.
func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves time forward by d and runs every timer due by then.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		t := c.popDue()
		if t == nil {
			return
		}
		t.f()
	}
}

// popDue removes and returns the earliest timer due, or nil.
func (c *ManualClock) popDue() *manualTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = slices.DeleteFunc(c.timers, func(t *manualTimer) bool { return t.done })
	var due *manualTimer
	for _, t := range c.timers {
		if !t.at.After(c.now) && (due == nil || t.at.Before(due.at)) {
			due = t
		}
	}
	if due != nil {
		due.done = true
	}
	return due
}

// Pending returns how many timers are waiting to fire.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}
