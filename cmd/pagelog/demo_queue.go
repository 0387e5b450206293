package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/pagelog/pagelog/queue"
)

// The queue phase of `pagelog demo` runs its first half in a child process
// that the demo kills with SIGKILL: a real crash. The child is this same
// executable, recognized by an environment variable in init (so that it
// also works from the test binary, whose main never runs).
const demoChildEnv = "PAGELOG_DEMO_QUEUE_CHILD"

func init() {
	if os.Getenv(demoChildEnv) == "1" && len(os.Args) == 5 {
		os.Exit(queueDemoChild(os.Args[1], os.Args[2], os.Args[3], os.Args[4]))
	}
}

// Marks the child keeps per message in a shared file (one byte each), read
// by the parent after the kill.
const (
	markReceived  = 1 << 0 // handed out in the child
	markDeleting  = 1 << 1 // the child called Delete (set before the call)
	markReceived2 = 1 << 2 // handed out in the parent
	markDeleting2 = 1 << 3 // the parent called Delete
)

// queueDemoChild sends, receives and deletes with 4 workers until it is
// killed, reporting "progress <cycles> <elapsed ns>" lines on stdout.
func queueDemoChild(dir, marksPath, nArg, sizeArg string) int {
	n, err1 := strconv.Atoi(nArg)
	size, err2 := strconv.Atoi(sizeArg)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "queue demo child:", err)
		return 2
	}
	marks, err := mapMarks(marksPath, n, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue demo child:", err)
		return 1
	}
	q, err := queue.Open(dir, queue.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue demo child:", err)
		return 1
	}
	d := &demo{ctx: context.Background(), messages: n, size: size, template: makeTemplate(size)}
	w := &queueWorkers{d: d, q: q, marks: marks, recv: markReceived, del: markDeleting}
	w.progress = progressPrinter(int64(max(1, min(4096, n/20))))
	if err := w.run(context.Background(), 0, false); err != nil {
		fmt.Fprintln(os.Stderr, "queue demo child:", err)
		return 1
	}
	select {} // everything done before the kill came: wait for it
}

// progressPrinter returns a function that prints a progress line every
// step cycles.
func progressPrinter(step int64) func(cycles int64, elapsed time.Duration) {
	return func(cycles int64, elapsed time.Duration) {
		if cycles%step == 0 {
			fmt.Fprintf(os.Stdout, "progress %d %d\n", cycles, elapsed.Nanoseconds())
		}
	}
}

// mapMarks maps the marks file at path shared and writable: one uint32 per
// message, updated with atomic ORs. create makes it anew (the parent's
// call, before the child starts): n zeros written, not a hole made by
// ftruncate, so that a full disk fails here with ENOSPC instead of raising
// SIGBUS at a store through the mapping. Without create the file is the
// one the parent made, of that size.
func mapMarks(path string, n int, create bool) ([]uint32, error) {
	flag := os.O_RDWR | oNoFollow
	if create {
		flag |= os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if create {
		if _, err := f.WriteAt(make([]byte, 4*n), 0); err != nil {
			return nil, fmt.Errorf("marks file: %w", err)
		}
	} else if st, err := f.Stat(); err != nil {
		return nil, err
	} else if st.Size() != int64(4*n) {
		return nil, fmt.Errorf("marks file %s: %d bytes, not the %d the parent made", path, st.Size(), 4*n)
	}
	b, err := mapShared(f, 4*n)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n), nil
}

func unmapMarks(marks []uint32) error {
	return unmap(unsafe.Slice((*byte)(unsafe.Pointer(&marks[0])), 4*len(marks)))
}

// queueWorkers are the 4 goroutines of the demo's queue phase: each sends
// the next message while any is left, receives one, checks it, marks it
// and deletes it.
type queueWorkers struct {
	d         *demo
	q         *queue.Queue
	marks     []uint32
	recv, del uint32 // the marks this process sets

	next        atomic.Int64 // index of the next message to send
	sent        atomic.Int64 // messages whose Send returned (those sent before the run included)
	cycles      atomic.Int64
	redelivered atomic.Int64
	progress    func(cycles int64, elapsed time.Duration)
	lat         [][]time.Duration // per worker; nil: not measured
}

const queueDemoWorkers = 4

// run runs the workers, sending from message sent on. With drain they stop
// once every message was sent and the queue is empty; without, once every
// message was sent and as many received.
func (w *queueWorkers) run(ctx context.Context, sent int64, drain bool) error {
	w.next.Store(sent)
	w.sent.Store(sent)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	errc := make(chan error, queueDemoWorkers)
	for k := range queueDemoWorkers {
		go func() { errc <- w.work(ctx, cancel, k, start, drain) }()
	}
	var err error
	for range queueDemoWorkers {
		err = errors.Join(err, <-errc)
	}
	if err == nil {
		err = w.d.interrupted()
	}
	return err
}

func (w *queueWorkers) work(ctx context.Context, cancel func(), k int, start time.Time, drain bool) error {
	n := int64(w.d.messages)
	body := slices.Clone(w.d.template)
	// done reports, in drain mode, that every message was sent and deleted,
	// and wakes the workers blocked in Receive. It is asked after every
	// event that can make it true (a send completed, a delete made), by the
	// worker that made it: the condition only ever becomes true, so the
	// worker of the last such event sees it.
	done := func() bool {
		if drain && w.sent.Load() >= n && w.empty() {
			cancel()
			return true
		}
		return false
	}
	for {
		if done() {
			return nil
		}
		t0 := time.Now()
		i := w.next.Add(1) - 1
		if i < n {
			stamp(body, uint64(i))
			if _, err := w.q.Send(body); err != nil {
				return err
			}
			w.sent.Add(1)
		}
		if i >= n && !drain {
			return nil
		}
		if done() {
			return nil
		}
		m, err := w.q.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := w.handle(m); err != nil {
			return err
		}
		c := w.cycles.Add(1)
		if w.lat != nil {
			w.lat[k] = append(w.lat[k], time.Since(t0))
		}
		if w.progress != nil {
			w.progress(c, time.Since(start))
		}
	}
}

// handle checks and deletes one message, counting it as redelivered when
// it was handed out before (in either process, or after a deadline).
func (w *queueWorkers) handle(m queue.Message) error {
	if m.Offset >= uint64(len(w.marks)) || !w.sentByDemo(m.Body) {
		return fmt.Errorf("offset %d: not a message this demo sent", m.Offset)
	}
	old := atomic.OrUint32(&w.marks[m.Offset], w.recv)
	if m.Receives > 1 || old&(markReceived|markReceived2) != 0 {
		w.redelivered.Add(1)
	}
	atomic.OrUint32(&w.marks[m.Offset], w.del)
	return w.q.Delete(m.Offset)
}

// sentByDemo reports whether body is one of the demo's messages. Workers
// send concurrently, so a message's index (its stamp) and its offset may
// differ: the stamp is read from the body.
func (w *queueWorkers) sentByDemo(body []byte) bool {
	if w.d.size < 8 {
		return len(body) == w.d.size
	}
	i := binary.BigEndian.Uint64(body)
	return i < uint64(w.d.messages) && w.d.check(body, i)
}

// empty reports whether the head reached the end.
func (w *queueWorkers) empty() bool {
	st := w.q.Stats()
	return st.Head == st.End
}
