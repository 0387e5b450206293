package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// fakeClock is the engine's ManualClock, started at a fixed date.
type fakeClock = ManualClock

func newFakeClock() *fakeClock {
	return NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

const testVisibility = 10 * time.Second

// openTestQueue opens a queue in dir with a fake clock and small segments.
func openTestQueue(t testing.TB, dir string, clock *fakeClock, mod ...func(*Options)) *Queue {
	t.Helper()
	o := Options{
		Log:                engine.Options{SegmentBytes: 4096},
		Visibility:         testVisibility,
		CheckpointInterval: time.Second,
		Clock:              clock,
	}
	for _, m := range mod {
		m(&o)
	}
	q, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

// tryRecv receives without blocking: ok is false when nothing is ready.
func tryRecv(t testing.TB, q *Queue) (Message, bool) {
	t.Helper()
	m, ok, err := q.TryReceive()
	if err != nil && !ok {
		t.Fatalf("TryReceive: %v", err)
	}
	return m, ok
}

func mustSend(t testing.TB, q *Queue, body string) uint64 {
	t.Helper()
	off, err := q.Send([]byte(body))
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return off
}

func mustDelete(t testing.TB, q *Queue, off uint64) {
	t.Helper()
	if err := q.Delete(off); err != nil {
		t.Fatalf("Delete(%d): %v", off, err)
	}
}

func mustCloseQueue(t testing.TB, q *Queue) {
	t.Helper()
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// drain receives every ready message and returns their offsets.
func drain(t testing.TB, q *Queue) []Message {
	t.Helper()
	var got []Message
	for {
		m, ok := tryRecv(t, q)
		if !ok {
			return got
		}
		got = append(got, m)
	}
}

func offsetsOf(ms []Message) []uint64 {
	offs := make([]uint64, len(ms))
	for i, m := range ms {
		offs[i] = m.Offset
	}
	return offs
}

// waitFor waits until cond holds, checking often; it fails after a
// minute (a hang).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// blockedReceivers returns how many receivers wait in q.
func blockedReceivers(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters.w)
}

func TestQueueSendReceiveDelete(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	for i := range 3 {
		if off := mustSend(t, q, fmt.Sprint("msg ", i)); off != uint64(i) {
			t.Fatalf("send %d got offset %d", i, off)
		}
	}
	for i := range 3 {
		m, ok := tryRecv(t, q)
		if !ok {
			t.Fatalf("receive %d: nothing ready", i)
		}
		want := Message{Offset: uint64(i), Body: []byte(fmt.Sprint("msg ", i)), Receives: 1, Deadline: clock.Now().Add(testVisibility)}
		if m.Offset != want.Offset || string(m.Body) != string(want.Body) || m.Receives != 1 || !m.Deadline.Equal(want.Deadline) {
			t.Fatalf("receive %d: got %+v, want %+v", i, m, want)
		}
	}
	if _, ok := tryRecv(t, q); ok {
		t.Fatal("a fourth message was handed out")
	}
	st := q.Stats()
	if st.End != 3 || st.Cursor != 3 || st.Head != 0 || st.InFlight != 3 || st.ReadyAgain != 0 || st.Sent != 3 || st.Received != 3 {
		t.Fatalf("stats after 3 receives: %+v", st)
	}
	mustDelete(t, q, 1)
	mustDelete(t, q, 0)
	st = q.Stats()
	if st.Head != 2 || st.InFlight != 1 || st.Deleted != 2 {
		t.Fatalf("stats after deleting 0 and 1: %+v", st)
	}
}

func TestQueueDeleteSemantics(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	for i := range 4 {
		mustSend(t, q, fmt.Sprint(i))
	}
	tryRecv(t, q) // 0
	tryRecv(t, q) // 1
	mustDelete(t, q, 0)
	if err := q.Delete(0); err != nil {
		t.Errorf("second delete of 0: %v, want nil", err)
	}
	for _, off := range []uint64{2, 3, 4, 1 << 40} { // not handed out, beyond the end
		if err := q.Delete(off); !errors.Is(err, ErrNotInFlight) {
			t.Errorf("Delete(%d) = %v, want ErrNotInFlight", off, err)
		}
	}
	clock.Advance(testVisibility) // 1 is ready again
	if st := q.Stats(); st.InFlight != 0 || st.ReadyAgain != 1 {
		t.Fatalf("after the deadline: %+v", st)
	}
	if err := q.Delete(1); err != nil { // a late acknowledgement
		t.Fatalf("late delete of 1: %v", err)
	}
	if m, _ := tryRecv(t, q); m.Offset != 2 || m.Receives != 1 {
		t.Fatalf("after the late delete got %+v, want offset 2", m)
	}
	if st := q.Stats(); st.Head != 2 || st.ReadyAgain != 0 || st.Deleted != 2 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestQueueRedeliveryLowestFirst(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	for i := range 5 {
		mustSend(t, q, fmt.Sprint(i))
	}
	tryRecv(t, q) // 0 at t0
	tryRecv(t, q) // 1 at t0
	clock.Advance(time.Second)
	tryRecv(t, q) // 2 at t0+1s
	mustDelete(t, q, 1)
	clock.Advance(testVisibility) // 0 and 2 expire
	got := drain(t, q)
	if !slices.Equal(offsetsOf(got), []uint64{0, 2, 3, 4}) {
		t.Fatalf("hand-outs %v, want [0 2 3 4]", offsetsOf(got))
	}
	for i, want := range []int{2, 2, 1, 1} {
		if got[i].Receives != want {
			t.Errorf("offset %d: Receives %d, want %d", got[i].Offset, got[i].Receives, want)
		}
	}
	if st := q.Stats(); st.Redelivered != 2 || st.Received != 7 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestQueueReceiveWokenBySend(t *testing.T) {
	q := openTestQueue(t, t.TempDir(), newFakeClock())
	defer mustCloseQueue(t, q)
	got := make(chan Message, 1)
	go func() {
		m, err := q.Receive(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	waitFor(t, "a blocked receiver", func() bool { return blockedReceivers(q) == 1 })
	mustSend(t, q, "wake up")
	if m := <-got; m.Offset != 0 || string(m.Body) != "wake up" {
		t.Fatalf("got %+v", m)
	}
}

func TestQueueReceiveWokenByDeadline(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	mustSend(t, q, "slow")
	first, _ := tryRecv(t, q)
	got := make(chan Message, 1)
	go func() {
		m, err := q.Receive(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	waitFor(t, "a blocked receiver", func() bool { return blockedReceivers(q) == 1 })
	clock.Advance(testVisibility - time.Nanosecond)
	if blockedReceivers(q) != 1 {
		t.Fatal("receiver woke before the deadline")
	}
	clock.Advance(time.Nanosecond) // the deadline timer fires: no Receive or Stats call is needed
	m := <-got
	if m.Offset != first.Offset || m.Receives != 2 {
		t.Fatalf("got %+v, want offset %d again with Receives 2", m, first.Offset)
	}
}

func TestQueueReceiveContext(t *testing.T) {
	q := openTestQueue(t, t.TempDir(), newFakeClock())
	defer mustCloseQueue(t, q)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := q.Receive(ctx)
		errc <- err
	}()
	waitFor(t, "a blocked receiver", func() bool { return blockedReceivers(q) == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive after cancel: %v", err)
	}
	if n := blockedReceivers(q); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer dcancel()
	if _, err := q.Receive(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive with a timeout: %v", err)
	}
	// A done context returns its error and hands out nothing, even when a
	// message is ready (the Go convention).
	mustSend(t, q, "ready")
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		if m, err := q.Receive(done); !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive with a done ctx and a ready message: %+v, %v", m, err)
		}
	}
	if st := q.Stats(); st.Received != 0 || st.InFlight != 0 {
		t.Fatalf("a Receive with a done context handed out a message: %+v", st)
	}
	if m, err := q.Receive(context.Background()); err != nil || m.Offset != 0 {
		t.Fatalf("Receive after: %+v, %v", m, err)
	}
}

func TestQueueCloseWakesReceivers(t *testing.T) {
	q := openTestQueue(t, t.TempDir(), newFakeClock())
	errc := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := q.Receive(context.Background())
			errc <- err
		}()
	}
	waitFor(t, "3 blocked receivers", func() bool { return blockedReceivers(q) == 3 })
	mustCloseQueue(t, q)
	for range 3 {
		if err := <-errc; !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("blocked Receive at Close: %v", err)
		}
	}
	if _, err := q.Send(nil); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	if err := q.Delete(0); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Delete after Close: %v", err)
	}
	if err := q.Close(); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// A body used after its message was deleted, its segment removed below the
// head, and the queue closed reads stale bytes or zeros; it never crashes.
func TestQueueStaleBodyNeverCrashes(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	var bodies [][]byte
	for i := range 200 {
		mustSend(t, q, fmt.Sprintf("%03d %s", i, make([]byte, 100)))
	}
	for _, m := range drain(t, q) {
		bodies = append(bodies, m.Body)
		mustDelete(t, q, m.Offset)
	}
	// A checkpoint: segments below the head go. An early checkpoint on
	// its own goroutine may have taken the tick's place and run after
	// the Advance.
	clock.Advance(time.Second)
	waitFor(t, "a message segment removed below the head", func() bool { return q.log.First() > 0 })
	mustCloseQueue(t, q)
	sum := 0
	for _, b := range bodies {
		for _, c := range b {
			sum += int(c)
		}
	}
	t.Logf("read %d stale bodies (byte sum %d)", len(bodies), sum)
}

func TestQueueDiscard(t *testing.T) {
	q := openTestQueue(t, t.TempDir(), newFakeClock())
	defer mustCloseQueue(t, q)
	for i := range 5 {
		mustSend(t, q, fmt.Sprint(i))
	}
	tryRecv(t, q) // 0
	for _, off := range []uint64{0, 1, 3, 3} {
		if err := q.Discard(off); err != nil {
			t.Fatalf("Discard(%d): %v", off, err)
		}
	}
	if err := q.Discard(5); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Discard beyond the end: %v", err)
	}
	if err := q.Delete(3); err != nil {
		t.Fatalf("Delete of a discarded offset: %v", err)
	}
	if got := offsetsOf(drain(t, q)); !slices.Equal(got, []uint64{2, 4}) {
		t.Fatalf("after discarding 0, 1, 3: handed out %v", got)
	}
	if st := q.Stats(); st.Head != 2 || st.Deleted != 3 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestQueueBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Log: engine.Options{ReadOnly: true}},
		{Visibility: -1},
		{CheckpointInterval: -time.Second},
		{Log: engine.Options{SegmentBytes: -1}},
	} {
		if q, err := Open(t.TempDir(), o); !errors.Is(err, engine.ErrBadOptions) {
			if q != nil {
				q.Close()
			}
			t.Errorf("Open(%+v): %v, want engine.ErrBadOptions", o, err)
		}
	}
}

// The deadline timer is set once per run of increasing deadlines, not once
// per Receive.
func TestQueueOneTimerForIncreasingDeadlines(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	before := clock.Pending() // the checkpoint timer
	for i := range 50 {
		mustSend(t, q, "x")
		tryRecv(t, q)
		clock.Advance(time.Millisecond * time.Duration(i%3))
	}
	if n := clock.Pending() - before; n != 1 {
		t.Fatalf("%d deadline timers pending, want 1", n)
	}
}

// Under SyncAlways a Send returns once the message is synced, receivers see
// only synced messages, and Delete returns once its delete record is synced.
func TestQueueSyncAlways(t *testing.T) {
	dir := t.TempDir()
	always := func(o *Options) { o.Log.Sync = engine.SyncAlways }
	q := openTestQueue(t, dir, newFakeClock(), always)
	for i := range 5 {
		off := mustSend(t, q, fmt.Sprint("body ", i))
		if d := q.log.Durable(); d <= off {
			t.Fatalf("Send(%d) returned with the log durable below %d", off, d)
		}
	}
	for _, m := range drain(t, q) {
		if m.Offset%2 == 0 {
			mustDelete(t, q, m.Offset)
			if d := q.dels.Durable(); d != q.dels.Next() {
				t.Fatalf("Delete(%d) returned with the delete log durable to %d of %d", m.Offset, d, q.dels.Next())
			}
		}
	}
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, newFakeClock(), always)
	defer mustCloseQueue(t, q)
	wantRedelivery(t, q, []uint64{1, 3})
}

// A damaged record is handed out like any message, as an error that names
// its offset; deleting it skips it.
func TestQueueReceiveDamagedRecord(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	body := make([]byte, 1500)
	for range 3 {
		if _, err := q.Send(body); err != nil {
			t.Fatal(err)
		}
	}
	mustCloseQueue(t, q)
	// Records 0 and 1 fill the sealed first segment; flip a bit of 1's body.
	path := filepath.Join(dir, "00000000000000000000.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[1516+16+10] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	tryRecv(t, q)
	m, ok, err := q.TryReceive()
	if !ok || !errors.Is(err, engine.ErrCorrupt) || m.Offset != 1 || m.Receives != 1 {
		t.Fatalf("Receive of the damaged record: %+v, %v", m, err)
	}
	mustDelete(t, q, 1)
	if m, _ := tryRecv(t, q); m.Offset != 2 {
		t.Fatalf("after deleting the damaged record got %+v", m)
	}
}
