package engine

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Waking readers. A writable log wakes the goroutines blocked in its own
// Wait through a channel that is closed and replaced when next moves; the
// appender pays one atomic load when nobody waits. Readers in other
// processes follow through log.notify (see notify.go): the writer stores
// its end there after every append (one atomic store) and makes a system
// call only when a reader announced that it sleeps.
//
// How a reader in another process blocks was measured (bench/README.md,
// "Streams"): a futex on log.notify's word, inotify on the files, and
// polling with backoff. The futex won: inotify sees nothing of a write
// through a mapping (the writer would pay a write system call per append
// to be seen), and polling wakes late by its backoff or burns a core.

// waitState is a writable log's in-process waiters.
type waitState struct {
	n  atomic.Int32 // goroutines in Wait
	mu sync.Mutex
	ch chan struct{} // closed when next moves; nil when nobody took it
}

// broadcast wakes every waiter.
func (w *waitState) broadcast() {
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
}

// channel returns the channel the next broadcast closes.
func (w *waitState) channel() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// published is called by the writer under l.mu after next moved: it stores
// the new end in log.notify.
func (l *Log) published() {
	if l.notify != nil && l.active != nil {
		l.notify.publish(l.active)
		if l.notify.sleeping() {
			l.wakeSleepers.Store(true)
		}
	}
}

// wakeWaiters is called by the writer after l.mu is released, when next
// moved: it wakes in-process waiters and sleeping readers of other
// processes, at the cost of two atomic loads when there are none.
func (l *Log) wakeWaiters() {
	if l.waits.n.Load() > 0 {
		l.waits.broadcast()
	}
	if l.wakeSleepers.Load() && l.wakeSleepers.Swap(false) {
		l.notify.wake()
	}
}

// Wait returns once the record at offset exists (offset < Next()), with
// ctx's error if ctx ends first, or with ErrClosed once the log is closed.
// It works on both kinds of log: on one opened for writing it waits for
// this process's appends; on one opened with OpenReadOnly it follows the
// process that appends (see the package documentation, "Following a
// writer"). Options.WaitSpin makes it look without sleeping for a while
// first: the lowest latency, for a core.
//
// A loop that never ends reads with Wait and Read (or Records from where
// the last one stopped):
//
//	for off := from; ; off++ {
//		if err := l.Wait(ctx, off); err != nil {
//			return err
//		}
//		rec, err := l.Read(off)
//		...
//	}
//
// Offsets the log dropped from its front meanwhile give Read an error
// matching ErrNotFound (see Records, which reports them once); a Cursor
// does this bookkeeping, and keeps its position across restarts.
func (l *Log) Wait(ctx context.Context, offset uint64) error {
	if offset < l.next.Load() {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if l.closed.Load() {
		return ErrClosed
	}
	if l.readOnly {
		return l.followWait(ctx, offset)
	}
	if d := l.opts.WaitSpin; d != 0 {
		if spinUntil(ctx, d, func() bool { return offset < l.next.Load() || l.closed.Load() }) {
			if offset < l.next.Load() {
				return nil
			}
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	w := &l.waits
	w.n.Add(1)
	defer w.n.Add(-1)
	for {
		ch := w.channel()
		if offset < l.next.Load() {
			return nil
		}
		if l.closed.Load() {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// spinUntil calls done until it reports true (then it returns true), for
// at most d (forever when d is negative), or until ctx ends.
func spinUntil(ctx context.Context, d time.Duration, done func() bool) bool {
	var deadline time.Time
	if d > 0 {
		deadline = time.Now().Add(d)
	}
	for i := 1; ; i++ {
		if done() {
			return true
		}
		if i%256 == 0 {
			if ctx.Err() != nil || d > 0 && time.Now().After(deadline) {
				return false
			}
			runtime.Gosched()
		}
	}
}

// backOff is the pause of a loop that looks again at a log that changed
// under it (a drop, a roll, a cut between two looks): none for the first
// tries, then a sleep that grows from pollMin to pollMax, so that a state
// that does not settle costs no core. It returns ctx's error once ctx
// ends.
func backOff(ctx context.Context, tries int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	const quick = 8
	if tries < quick {
		runtime.Gosched()
		return nil
	}
	t := time.NewTimer(min(pollMin<<min(tries-quick, 10), pollMax))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Polling of a reader that cannot sleep on log.notify (no such file yet,
// or no permission to announce itself): a backoff from pollMin to
// pollMax. A sleeper on the futex also looks again after pollMax, in
// case the writer does not publish (a writer of an older version).
const (
	pollMin = 100 * time.Microsecond
	pollMax = 50 * time.Millisecond
)

// sleepAfter is how long a reader of another process looks for the next
// record before it sleeps on log.notify: long enough that followers of a
// writer appending steadily do not make it pay a wake-up system call per
// append (BenchmarkFanOut), short enough to cost nothing when it stops.
const sleepAfter = 20 * time.Microsecond

// followWait is Wait on a log opened read-only.
func (l *Log) followWait(ctx context.Context, offset uint64) error {
	f := l.fol
	f.waited.Store(true)
	ready := func() bool { return offset < l.next.Load() || l.closed.Load() }
	result := func() error {
		if offset < l.next.Load() {
			return nil
		}
		if l.closed.Load() {
			return ErrClosed
		}
		return ctx.Err()
	}
	look := func() bool {
		if m := f.nm.Load(); m != nil && f.quiet(m) {
			return ready()
		}
		l.refresh()
		return ready()
	}
	if d := l.opts.WaitSpin; d != 0 {
		if spinUntil(ctx, d, look) {
			return result()
		}
	}
	backoff := pollMin
	for {
		l.refresh()
		if ready() || ctx.Err() != nil {
			return result()
		}
		m := f.nm.Load()
		if m != nil && m.writable && futexShared && m.acquire() {
			// A short look first: a writer that appends steadily brings
			// the next record within it, and never pays for a wake-up.
			if !spinUntil(ctx, sleepAfter, look) {
				f.sleep(l, m, ctx, ready)
			}
			m.release()
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-f.closing:
			t.Stop()
		}
		backoff = min(2*backoff, pollMax)
	}
}

// quiet reports whether log.notify shows the tail a spinning reader saw
// last (nothing appended since): one atomic load.
func (f *follower) quiet(m *notifyMap) bool {
	t := atomic.LoadUint64(m.u64(notifyTail))
	if t == f.seen.Load() {
		return true
	}
	f.seen.Store(t)
	return false
}

// sleep blocks on log.notify's futex word until the writer stores a new
// end, ctx ends or the log closes (or pollMax passes). It announces itself
// first, then looks again, so that an append between the look and the
// sleep is never missed: the writer stores the end, then reads the
// announcement; the reader announces, then reads the end.
func (f *follower) sleep(l *Log, m *notifyMap, ctx context.Context, ready func() bool) {
	word := m.u32(notifyFutex)
	val := atomic.LoadUint32(word)
	m.announceSleep()
	if l.refresh(); ready() || ctx.Err() != nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { futexWake(word) })
	defer stop()
	futexWait(word, val, pollMax)
}

// startStreams sets up waking at open: a writable log opens log.notify (a
// log without one still works: its readers look at the files), a
// read-only one gets ready to follow its writer.
func (l *Log) startStreams() {
	if l.readOnly {
		l.startFollowing()
		return
	}
	if nt, err := openNotifier(l.dir, l.opts.FileMode, l.active); err == nil {
		l.notify = nt
	}
}
