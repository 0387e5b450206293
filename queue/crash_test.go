package queue

// Crash tests of the queue's features: a busy workload (sends with delays,
// groups and dedup ids, batches, receives that delete, abandon, release
// and extend, dead-letter moves, redrives) is cut by kill -9 or by a
// simulated power failure, and what comes back is checked against what
// was acknowledged.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

var crashRounds = flag.Int("queue.crash", 3, "rounds of TestQueueKill9Features and TestQueuePowerLoss")

// Events of the workload, with the offset and the body's id:
//
//	S off id   a send (or one message of a batch) was acknowledged
//	H off id   a message was handed out
//	d off id   Delete is about to be called
//	D off id   Delete returned nil
const (
	evSent     = 'S'
	evHanded   = 'H'
	evDeleting = 'd'
	evDeleted  = 'D'
)

type wlEvent struct {
	kind byte
	off  uint64
	id   uint64
}

// wlBody is the body of message id: its id and padding, so that a torn or
// foreign body shows.
func wlBody(id uint64) []byte {
	return fmt.Appendf(nil, "wl-%d-%s", id, strings.Repeat("p", int(id%97)))
}

// wlID parses a body made by wlBody.
func wlID(b []byte) (uint64, bool) {
	f := strings.SplitN(string(b), "-", 3)
	if len(f) != 3 || f[0] != "wl" {
		return 0, false
	}
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || string(wlBody(id)) != string(b) {
		return 0, false
	}
	return id, true
}

// wlOptions are the workload queue's options: short deadlines so that
// messages come back and move to the dead letters, small segments so that
// checkpoints drop some.
func wlOptions(policy engine.SyncPolicy) Options {
	return Options{
		Log:                engine.Options{SegmentBytes: 16 << 10, Sync: policy},
		Visibility:         30 * time.Millisecond,
		CheckpointInterval: 5 * time.Millisecond,
		MaxReceives:        2,
	}
}

// workloadChecks returns the checks of a workload's workers: stopped
// reports whether stop is closed; check reports whether err is nil, and
// calls fail with what and err when it is not and the workload was not
// stopped (nothing closes the queue or store before that).
func workloadChecks(stop <-chan struct{}, fail func(string)) (stopped func() bool, check func(what string, err error) bool) {
	stopped = func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	check = func(what string, err error) bool {
		if err != nil && !stopped() {
			fail(fmt.Sprintf("%s: %v", what, err))
		}
		return err == nil
	}
	return stopped, check
}

// workload runs senders, receivers and a redriver on q until stop is
// closed, calling emit for each event (from many goroutines). It returns a
// function that waits for the workers to stop; a worker that finds the
// queue broken (an error other than ErrClosed) calls fail.
func workload(q *Queue, stop <-chan struct{}, emit func(wlEvent), fail func(string)) (wait func()) {
	var wg sync.WaitGroup
	var ids atomic.Uint64
	stopped, check := workloadChecks(stop, fail)
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			for !stopped() {
				id := ids.Add(1)
				var o SendOptions
				switch p := rng.IntN(10); {
				case p < 2:
					bodies := [][]byte{wlBody(id)}
					for range rng.IntN(4) {
						bodies = append(bodies, wlBody(ids.Add(1)))
					}
					first, err := q.SendBatch(bodies)
					if !check("SendBatch", err) {
						return
					}
					for k, b := range bodies {
						bid, _ := wlID(b)
						emit(wlEvent{evSent, first + uint64(k), bid})
					}
					continue
				case p < 5:
					o.Group = fmt.Sprint("g", rng.IntN(5))
				case p < 6:
					o.Delay = time.Duration(rng.IntN(20)) * time.Millisecond
				case p < 7:
					o.DedupID = fmt.Sprint("dd", id)
				}
				off, err := q.SendWith(wlBody(id), o)
				if !check("SendWith", err) {
					return
				}
				emit(wlEvent{evSent, off, id})
				if o.DedupID != "" {
					again, err := q.SendWith(wlBody(ids.Add(1)), o)
					if !check("SendWith again", err) {
						return
					}
					if again != off {
						fail(fmt.Sprintf("dedup id %s sent twice got offsets %d and %d", o.DedupID, off, again))
					}
				}
			}
		}()
	}
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var batch []wlEvent
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { <-stop; cancel() }()
			for !stopped() {
				m, err := q.Receive(ctx)
				if err != nil {
					if ctx.Err() == nil {
						check("Receive", err)
					}
					return
				}
				id, ok := wlID(m.Body)
				if !ok {
					switch {
					case stopped():
						// The test may close the queue under this
						// receiver, which ends the body's lifetime (it
						// then reads as zeros): not a failure.
						return
					case !time.Now().Before(m.Deadline):
						// The deadline (30 ms) passed before the body
						// was read: another receiver may have had the
						// message since, deleted it and dropped its
						// segment, which ends this body's lifetime too
						// (it reads zeros, or a later message of the
						// queue). A slow machine does it (emulated 32-bit
						// arm did); not a failure, and nothing to act on.
						continue
					}
					fail(fmt.Sprintf("offset %d: body %q was never sent, read within its deadline", m.Offset, m.Body))
					return
				}
				emit(wlEvent{evHanded, m.Offset, id})
				switch p := rng.IntN(20); {
				case p < 9:
					emit(wlEvent{evDeleting, m.Offset, id})
					if !check("Delete", q.Delete(m.Offset)) {
						return
					}
					emit(wlEvent{evDeleted, m.Offset, id})
				case p < 12:
					batch = append(batch, wlEvent{0, m.Offset, id})
					if len(batch) < 3 {
						continue
					}
					if !deleteBatch(q, batch, emit, check) {
						return
					}
					batch = batch[:0]
				case p < 14:
					if err := q.Release(m.Offset); err != nil && !errors.Is(err, ErrNotInFlight) {
						check("Release", err)
					}
				case p < 15:
					if err := q.ChangeVisibility(m.Offset, 50*time.Millisecond); err != nil && !errors.Is(err, ErrNotInFlight) {
						check("ChangeVisibility", err)
					}
				}
				// Otherwise abandoned: it comes back, and after two
				// receives it moves to the dead letters.
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped() {
			// Now and then: the dead letters hold some of the time.
			time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
			if _, err := q.Redrive(3); !check("Redrive", err) {
				return
			}
		}
	}()
	return wg.Wait
}

// wlLedger is what the workload acknowledged.
type wlLedger struct {
	sentAt   map[uint64]uint64 // source offset -> id of an acknowledged send
	deleting map[uint64]bool   // ids a Delete was called for (perhaps done)
	deleted  map[uint64]bool   // source offsets whose Delete returned
	maxSent  uint64
	ids      map[uint64]bool // ids acknowledged (sent)
}

// newLedger reads the events: sends and returned deletes of
// events[:acked], acknowledged before the crash, and the deletes called in
// all of them (a delete called after the crash began may have reached the
// disk too).
func newLedger(events []wlEvent, acked int) *wlLedger {
	l := &wlLedger{sentAt: map[uint64]uint64{}, deleting: map[uint64]bool{},
		deleted: map[uint64]bool{}, ids: map[uint64]bool{}}
	for k, e := range events {
		if k >= acked && e.kind != evDeleting {
			continue
		}
		switch e.kind {
		case evSent:
			l.sentAt[e.off] = e.id
			l.ids[e.id] = true
			l.maxSent = max(l.maxSent, e.off)
		case evDeleting:
			l.deleting[e.id] = true
		case evDeleted:
			l.deleted[e.off] = true
		}
	}
	return l
}

// wlRecovered is what a reopened queue holds.
type wlRecovered struct {
	source, dead map[uint64]bool // ids handed out by each
	damaged      []wlDamage
	order        map[string][]uint64 // group -> source offsets in hand-out order
}

// wlDamage is a damaged hand-out after the crash.
type wlDamage struct {
	dead bool // from the dead letters
	off  uint64
	why  string
}

// drainAll receives and deletes every message of q and of its dead-letter
// queue, waiting for the moves due at open, and returns what they held.
func drainAll(t *testing.T, q *Queue, l *wlLedger) *wlRecovered {
	t.Helper()
	rec := &wlRecovered{source: map[uint64]bool{}, dead: map[uint64]bool{}, order: map[string][]uint64{}}
	take := func(q *Queue, into map[uint64]bool, source bool) int {
		n := 0
		for {
			m, ok, err := q.TryReceive()
			if !ok {
				if err != nil {
					t.Fatalf("TryReceive: %v", err)
				}
				return n
			}
			n++
			if err != nil {
				rec.damaged = append(rec.damaged, wlDamage{!source, m.Offset, err.Error()})
			} else if id, good := wlID(m.Body); !good {
				rec.damaged = append(rec.damaged, wlDamage{!source, m.Offset, fmt.Sprintf("body %q was never sent", m.Body)})
			} else {
				into[id] = true
				if source {
					if want, was := l.sentAt[m.Offset]; was && want != id {
						t.Errorf("offset %d: body of id %d, acknowledged with id %d", m.Offset, id, want)
					}
					if l.deleted[m.Offset] {
						t.Errorf("offset %d (id %d) handed out; its Delete had returned", m.Offset, id)
					}
					rec.order[m.Group] = append(rec.order[m.Group], m.Offset)
				}
			}
			if err := q.Delete(m.Offset); err != nil {
				t.Fatalf("Delete(%d): %v", m.Offset, err)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := take(q, rec.source, true)
		st := q.Stats()
		if st.Messages == 0 && st.Dying == 0 {
			break
		}
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("messages left that never come out: %+v", st)
			}
			time.Sleep(time.Millisecond) // a delay or a move to the dead letters
		}
	}
	if d := q.DeadLetter(); d != nil {
		take(d, rec.dead, false)
	}
	for g, offs := range rec.order {
		for k := 1; g != "" && k < len(offs); k++ {
			if offs[k] < offs[k-1] {
				t.Errorf("group %s handed out %d after %d", g, offs[k], offs[k-1])
			}
		}
	}
	return rec
}

// checkRecovered checks what came back against the ledger: every
// acknowledged send that no Delete was called for is in the source or in
// the dead letters.
func checkRecovered(t *testing.T, l *wlLedger, rec *wlRecovered) {
	t.Helper()
	var missing []uint64
	for id := range l.ids {
		if !l.deleting[id] && !rec.source[id] && !rec.dead[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d acknowledged messages never deleted are lost: ids %v", len(missing), missing[:min(len(missing), 20)])
	}
}

// TestQueueKill9Features: a queue process runs the workload (MaxReceives
// 2, so moves to the dead letters and redrives run all the time) and is
// killed with SIGKILL at a random moment. The reopened queue and its dead
// letters hold every acknowledged message that no Delete was called for;
// no message whose Delete returned comes back; groups come out in order;
// no record is damaged; new messages take new offsets.
func TestQueueKill9Features(t *testing.T) {
	if dir := os.Getenv("PAGELOG_QUEUE_KILL_DIR"); dir != "" {
		kill9Child(dir)
		return
	}
	t.Parallel()
	for round := range *crashRounds {
		dir := t.TempDir()
		cmd, pipe, stderr := startChild(t, "TestQueueKill9Features", "PAGELOG_QUEUE_KILL_DIR="+dir)
		got, busy, copied := childEvents(pipe, 400)
		select {
		case <-busy:
		case <-time.After(30 * time.Second):
		}
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		killChild(t, cmd, copied, stderr)
		events := *got
		l := newLedger(events, len(events))
		if len(l.ids) < 50 {
			t.Fatalf("round %d: the child did too little (%d events)\nstderr: %s", round, len(events), stderr.String())
		}
		o := wlOptions(engine.SyncNone)
		o.Visibility = time.Minute // no redelivery while the check drains
		q, err := Open(dir, o)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		r := q.Recovery()
		rec := drainAll(t, q, l)
		checkRecovered(t, l, rec)
		if len(rec.damaged) > 0 {
			t.Errorf("round %d: damaged hand-outs after kill -9: %v", round, rec.damaged)
		}
		if off := mustSend(t, q, "after"); off <= l.maxSent {
			t.Errorf("round %d: a new message took offset %d, acknowledged before the kill", round, off)
		}
		t.Logf("round %d: %d events, %d acknowledged; after reopen %d from the source, %d dead letters; recovery head %d, %d receive counts, %d dedup ids",
			round, len(events), len(l.ids), len(rec.source), len(rec.dead), r.Head, r.ReceiveCounts, r.DedupIDs)
		mustCloseQueue(t, q)
	}
}

// childEvents reads the workload events a child prints on pipe, in the
// background: busy closes once n have come (or the pipe ended), copied
// when the pipe ends, and *events holds them all from then on.
func childEvents(pipe io.Reader, n int) (events *[]wlEvent, busy, copied chan struct{}) {
	events = new([]wlEvent)
	busy, copied = childLines(pipe, n, func(line string) bool {
		var e wlEvent
		if _, err := fmt.Sscanf(line, "%c %d %d", &e.kind, &e.off, &e.id); err != nil {
			return false
		}
		*events = append(*events, e)
		return true
	})
	return events, busy, copied
}

// childLines reads the lines a child prints on pipe, in the background,
// passing each to take (which reports whether it was an event): busy
// closes once n events have come (or the pipe ended), copied when the pipe
// ends.
func childLines(pipe io.Reader, n int, take func(string) bool) (busy, copied chan struct{}) {
	busy, copied = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pipe)
		got := 0
		for sc.Scan() {
			if take(sc.Text()) {
				if got++; got == n {
					close(busy)
				}
			}
		}
		if got < n {
			close(busy)
		}
	}()
	return busy, copied
}

func kill9Child(dir string) {
	deleteSegmentBytes = 24 * 64
	q, err := Open(dir, wlOptions(engine.SyncNone))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var mu sync.Mutex
	emit := func(e wlEvent) {
		line := fmt.Sprintf("%c %d %d\n", e.kind, e.off, e.id)
		mu.Lock()
		os.Stdout.WriteString(line) // one write per line: whole lines reach the pipe
		mu.Unlock()
	}
	workload(q, make(chan struct{}), emit, func(s string) {
		fmt.Fprintln(os.Stderr, s)
		os.Exit(4)
	})
	select {}
}

// deleteBatch deletes the messages of batch (offsets and ids) with one
// DeleteBatch, recording each as being deleted before and deleted after;
// it reports whether the call worked (check says so and records why).
func deleteBatch(q *Queue, batch []wlEvent, emit func(wlEvent), check func(string, error) bool) bool {
	offs := make([]uint64, len(batch))
	for k, e := range batch {
		emit(wlEvent{evDeleting, e.off, e.id})
		offs[k] = e.off
	}
	if !check("DeleteBatch", q.DeleteBatch(offs)) {
		return false
	}
	for _, e := range batch {
		emit(wlEvent{evDeleted, e.off, e.id})
	}
	return true
}
