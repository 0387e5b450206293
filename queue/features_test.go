package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

func mustSendWith(t testing.TB, q *Queue, body string, o SendOptions) uint64 {
	t.Helper()
	off, err := q.SendWith([]byte(body), o)
	if err != nil {
		t.Fatalf("SendWith(%q, %+v): %v", body, o, err)
	}
	return off
}

// recAttrs returns the attributes of the record at off in q's message log.
func recAttrs(t testing.TB, q *Queue, off uint64) (string, engine.Attrs) {
	t.Helper()
	r, err := q.log.Read(off)
	if err != nil {
		t.Fatalf("read %d: %v", off, err)
	}
	defer r.Release()
	a, err := r.Attrs()
	if err != nil {
		t.Fatalf("attributes of %d: %v", off, err)
	}
	a.Group, a.Dedup = slices.Clone(a.Group), slices.Clone(a.Dedup)
	return string(r.Body), a
}

func wantOffsets(t testing.TB, what string, got []Message, want ...uint64) {
	t.Helper()
	if !slices.Equal(offsetsOf(got), want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s: handed out %v, want %v", what, offsetsOf(got), want)
	}
}

// TestQueueDelay: a delayed message is never handed out before its due
// time, is handed out once it comes, and holds back no later message; due
// times are whole milliseconds rounded up, stored in the record;
// DefaultDelay applies to Send and SendBatch; bad options send nothing.
func TestQueueDelay(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	late := mustSendWith(t, q, "late", SendOptions{Delay: 5 * time.Second})
	now := mustSend(t, q, "now")
	odd := mustSendWith(t, q, "odd", SendOptions{Delay: 1500 * time.Microsecond})
	past := mustSendWith(t, q, "past", SendOptions{Due: clock.Now().Add(-time.Hour)})
	wantOffsets(t, "at once", drain(t, q), now, past)
	if _, a := recAttrs(t, q, odd); !a.HasDue || a.Due != clock.Now().UnixMilli()+2 {
		t.Fatalf("due of a 1.5 ms delay: %+v, want now + 2 ms", a)
	}
	if _, a := recAttrs(t, q, past); a.HasDue {
		t.Fatalf("a due time in the past is stored: %+v", a)
	}
	if st := q.Stats(); st.Delayed != 2 {
		t.Fatalf("stats: %+v, want 2 delayed", st)
	}
	clock.Advance(time.Millisecond)
	wantOffsets(t, "after 1 ms", drain(t, q))
	clock.Advance(time.Millisecond)
	wantOffsets(t, "after 2 ms", drain(t, q), odd)
	clock.Advance(5*time.Second - 2*time.Millisecond - 1)
	wantOffsets(t, "1 ns before due", drain(t, q))
	clock.Advance(1)
	got := drain(t, q)
	wantOffsets(t, "at due", got, late)
	if got[0].Receives != 1 || string(got[0].Body) != "late" {
		t.Fatalf("the delayed message: %+v", got[0])
	}
	// First looked at 1 ns before its due time, then at it.
	unseen := mustSendWith(t, q, "unseen", SendOptions{Delay: time.Second})
	clock.Advance(time.Second - 1)
	wantOffsets(t, "first look, 1 ns early", drain(t, q))
	clock.Advance(1)
	wantOffsets(t, "at due", drain(t, q), unseen)
	unseen = mustSendWith(t, q, "unseen", SendOptions{Delay: time.Second})
	clock.Advance(time.Second)
	wantOffsets(t, "first look at due", drain(t, q), unseen)

	for _, o := range []SendOptions{
		{Delay: time.Second, Due: clock.Now()}, {Delay: -1}, {Delay: MaxDelay + 1},
		{Due: clock.Now().Add(MaxDelay + time.Second)}, {Group: strings.Repeat("g", MaxIDBytes+1)},
		{DedupID: strings.Repeat("d", MaxIDBytes+1)},
	} {
		end := q.Stats().End
		if _, err := q.SendWith([]byte("x"), o); !errors.Is(err, engine.ErrInvalidAttrs) {
			t.Errorf("SendWith %+v: %v, want ErrInvalidAttrs", o, err)
		}
		if q.Stats().End != end {
			t.Errorf("SendWith %+v sent something", o)
		}
	}

	q2 := openTestQueue(t, t.TempDir(), clock, func(o *Options) { o.DefaultDelay = time.Second })
	defer mustCloseQueue(t, q2)
	mustSend(t, q2, "a")
	if _, err := q2.SendBatch([][]byte{[]byte("b"), []byte("c")}); err != nil {
		t.Fatal(err)
	}
	mustSendWith(t, q2, "d", SendOptions{Due: clock.Now()}) // explicitly now
	wantOffsets(t, "default delay", drain(t, q2), 3)
	clock.Advance(time.Second)
	wantOffsets(t, "default delay passed", drain(t, q2), 0, 1, 2)
}

// TestQueueDelayRestart: due times survive a restart (they are in the
// records), and a reopened queue hands nothing out early.
func TestQueueDelayRestart(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openTestQueue(t, dir, clock)
	mustSendWith(t, q, "later", SendOptions{Delay: time.Minute})
	mustSend(t, q, "now")
	wantOffsets(t, "before", drain(t, q), 1)
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	wantOffsets(t, "reopened", drain(t, q), 1)
	mustDelete(t, q, 1)
	clock.Advance(time.Minute - time.Millisecond)
	wantOffsets(t, "1 ms early", drain(t, q))
	clock.Advance(time.Millisecond)
	wantOffsets(t, "due", drain(t, q), 0)
}

// TestQueueDelayTimer: with the system clock, a receiver blocked in
// Receive gets a delayed message through the due-time timer alone, never
// before its due time. (How soon after it is measured by
// BenchmarkQueueDelayLateness.)
func TestQueueDelayTimer(t *testing.T) {
	t.Parallel()
	q, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := make(chan time.Time, 1)
	go func() {
		if _, err := q.Receive(context.Background()); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	waitFor(t, "a blocked receiver", func() bool { return blockedReceivers(q) == 1 })
	sent := time.Now()
	mustSendWith(t, q, "d", SendOptions{Delay: 30 * time.Millisecond})
	select {
	case at := <-got:
		if due := sent.Add(30 * time.Millisecond); at.Before(due) {
			t.Fatalf("handed out %v before its due time", due.Sub(at))
		}
	case <-time.After(time.Minute):
		t.Fatal("the delayed message was not handed out")
	}
}

// TestQueueGroups: within a group, one message at a time in send order,
// the next only after the previous is deleted, across redeliveries and a
// restart; other groups and ungrouped messages flow; a delayed front holds
// back its group only.
func TestQueueGroups(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openTestQueue(t, dir, clock)
	a1 := mustSendWith(t, q, "a1", SendOptions{Group: "a"})
	a2 := mustSendWith(t, q, "a2", SendOptions{Group: "a"})
	b1 := mustSendWith(t, q, "b1", SendOptions{Group: "b", Delay: time.Second})
	x := mustSend(t, q, "x")
	b2 := mustSendWith(t, q, "b2", SendOptions{Group: "b"})
	a3 := mustSendWith(t, q, "a3", SendOptions{Group: "a"})
	got := drain(t, q)
	wantOffsets(t, "first pass", got, a1, x)
	if got[0].Group != "a" || got[1].Group != "" {
		t.Fatalf("groups: %+v", got)
	}
	if st := q.Stats(); st.Groups != 2 || st.GroupsWaiting != 2 || st.Waiting != 3 || st.Delayed != 1 {
		t.Fatalf("stats: %+v", st)
	}
	clock.Advance(testVisibility) // a1 and x come back; b1 is due
	wantOffsets(t, "after the deadline", drain(t, q), a1, b1, x)
	mustDelete(t, q, a1)
	wantOffsets(t, "after deleting a1", drain(t, q), a2)
	mustDelete(t, q, b1)
	wantOffsets(t, "after deleting b1", drain(t, q), b2)
	mustCloseQueue(t, q) // a2 and b2 in flight, not deleted

	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	wantOffsets(t, "reopened", drain(t, q), a2, x, b2)
	mustDelete(t, q, b2)
	mustDelete(t, q, a2)
	wantOffsets(t, "the last one", drain(t, q), a3)
	if _, a := recAttrs(t, q, a3); string(a.Group) != "a" {
		t.Fatalf("a3's record: %+v", a)
	}
}

// TestQueueDedup: a DedupID sent again within the window appends nothing
// and returns the first offset, even once that message is deleted and
// after a restart; concurrent sends of one id append once; after the
// window, the id sends again.
func TestQueueDedup(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openTestQueue(t, dir, clock, func(o *Options) { o.DedupWindow = time.Minute })
	first := mustSendWith(t, q, "one", SendOptions{DedupID: "x"})
	if again := mustSendWith(t, q, "two", SendOptions{DedupID: "x"}); again != first || q.Stats().End != 1 {
		t.Fatalf("second send of x: offset %d (first %d), end %d", again, first, q.Stats().End)
	}
	filler := strings.Repeat("f", 200)
	for range 100 { // segments roll: the first one lies below the head once all is deleted
		mustSend(t, q, filler)
	}
	for _, m := range drain(t, q) {
		mustDelete(t, q, m.Offset)
	}
	clock.Advance(30 * time.Second) // checkpoints: only x's record holds the first segment
	if q.log.First() != 0 {
		t.Fatalf("the segment of a remembered dedup id was removed (the log starts at %d)", q.log.First())
	}
	if again := mustSendWith(t, q, "three", SendOptions{DedupID: "x"}); again != first {
		t.Fatalf("send of x after its message was deleted: %d, want %d", again, first)
	}
	if st := q.Stats(); st.DedupIDs != 1 {
		t.Fatalf("stats: %+v", st)
	}
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock, func(o *Options) { o.DedupWindow = time.Minute })
	if q.Recovery().DedupIDs != 1 {
		t.Fatalf("recovery: %+v", q.Recovery())
	}
	if again := mustSendWith(t, q, "four", SendOptions{DedupID: "x"}); again != first || q.Stats().End != 101 {
		t.Fatalf("send of x after a restart: %d, want %d", again, first)
	}
	var wg sync.WaitGroup
	offs := make([]uint64, 8)
	for i := range offs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offs[i] = mustSendWith(t, q, fmt.Sprint("c", i), SendOptions{DedupID: "y"})
		}()
	}
	wg.Wait()
	for _, o := range offs {
		if o != offs[0] {
			t.Fatalf("concurrent sends of y got offsets %v", offs)
		}
	}
	if q.Stats().End != 102 {
		t.Fatalf("concurrent sends of y appended %d", q.Stats().End-101)
	}
	clock.Advance(time.Minute + time.Second) // past the window, whatever the rebuild counted
	if again := mustSendWith(t, q, "five", SendOptions{DedupID: "x"}); again != 102 {
		t.Fatalf("send of x after the window: %d, want 102", again)
	}
	clock.Advance(3 * time.Second) // a checkpoint: nothing holds the first segment now
	if q.log.First() == 0 {
		t.Fatal("the first segment is kept after its dedup id expired")
	}
	mustCloseQueue(t, q)
}

// TestQueueChangeVisibility: extend, shorten, 0 and Release of a message
// in flight; anything not in flight gets ErrNotInFlight.
func TestQueueChangeVisibility(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	for i := range 4 {
		mustSend(t, q, fmt.Sprint(i))
	}
	drain(t, q)
	if err := q.ChangeVisibility(0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := q.ChangeVisibility(1, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := q.Release(2); err != nil {
		t.Fatal(err)
	}
	wantOffsets(t, "after Release(2)", drain(t, q), 2)
	clock.Advance(time.Second)
	wantOffsets(t, "after 1 s", drain(t, q), 1)
	clock.Advance(testVisibility)
	wantOffsets(t, "after the visibility", drain(t, q), 1, 2, 3)
	if err := q.DeleteBatch([]uint64{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := q.ChangeVisibility(3, MaxVisibility); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute - testVisibility - time.Second - 1)
	wantOffsets(t, "1 ns before 0's new deadline", drain(t, q))
	clock.Advance(1)
	got := drain(t, q)
	wantOffsets(t, "at 0's deadline", got, 0)
	if got[0].Receives != 2 {
		t.Fatalf("0: %+v", got[0])
	}
	mustDelete(t, q, 3)
	for _, off := range []uint64{2, 3, 4, 99} { // deleted, beyond the end
		if err := q.ChangeVisibility(off, time.Second); !errors.Is(err, ErrNotInFlight) {
			t.Errorf("ChangeVisibility(%d) = %v, want ErrNotInFlight", off, err)
		}
	}
	clock.Advance(testVisibility) // 0 is ready again, not in flight
	if err := q.Release(0); !errors.Is(err, ErrNotInFlight) {
		t.Errorf("Release of a ready message = %v, want ErrNotInFlight", err)
	}
	if err := q.ChangeVisibility(0, -1); !errors.Is(err, engine.ErrBadOptions) {
		t.Errorf("ChangeVisibility -1 = %v", err)
	}
	if err := q.ChangeVisibility(0, MaxVisibility+1); !errors.Is(err, engine.ErrBadOptions) {
		t.Errorf("ChangeVisibility beyond MaxVisibility = %v", err)
	}
}

// TestQueueBatches: SendBatch gives consecutive offsets; DeleteBatch
// deletes what it can and names the rest.
func TestQueueBatches(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	bodies := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	first, err := q.SendBatch(bodies)
	if err != nil || first != 0 {
		t.Fatalf("SendBatch: %d, %v", first, err)
	}
	if first, err := q.SendBatch(bodies[:2]); err != nil || first != 4 {
		t.Fatalf("second SendBatch: %d, %v", first, err)
	}
	if _, err := q.SendBatch([][]byte{[]byte("ok"), make([]byte, q.log.MaxRecordBytes()+1)}); !errors.Is(err, engine.ErrTooLarge) || q.Stats().End != 6 {
		t.Fatalf("SendBatch with a body too large: %v, end %d", err, q.Stats().End)
	}
	got := drain(t, q)
	wantOffsets(t, "batch", got, 0, 1, 2, 3, 4, 5)
	if string(got[2].Body) != "c" {
		t.Fatalf("body of 2: %q", got[2].Body)
	}
	err = q.DeleteBatch([]uint64{0, 2, 2, 7, 3, 99})
	if !errors.Is(err, ErrNotInFlight) || !strings.Contains(err.Error(), "offset 7") || !strings.Contains(err.Error(), "offset 99") ||
		strings.Contains(err.Error(), "offset 3 ") {
		t.Fatalf("DeleteBatch: %v", err)
	}
	if st := q.Stats(); st.Deleted != 3 || st.Head != 1 || st.InFlight != 3 {
		t.Fatalf("stats after DeleteBatch: %+v", st)
	}
	if err := q.DeleteBatch([]uint64{1, 4, 5}); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Head != 6 || st.Messages != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// deadOpts gives a queue MaxReceives 2.
func deadOpts(o *Options) { o.MaxReceives = 2 }

// TestQueueDeadLetters: a message received MaxReceives times is moved to
// the dead letters when its deadline passes (by the timer), by Release,
// and by ChangeVisibility 0, keeping body, group and dedup id, with its
// origin and receive count; it is deleted from the source, and the next
// message of its group goes on.
func TestQueueDeadLetters(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openTestQueue(t, dir, clock, deadOpts)
	d := q.DeadLetter()
	if d == nil || d.Dir() != dir+".dead" {
		t.Fatalf("dead-letter queue: %v", d)
	}
	p := mustSendWith(t, q, "poison", SendOptions{Group: "g", DedupID: "p"})
	n := mustSendWith(t, q, "next", SendOptions{Group: "g"})
	r := mustSend(t, q, "released")
	wantOffsets(t, "first", drain(t, q), p, r)
	if err := q.Release(r); err != nil {
		t.Fatal(err)
	}
	wantOffsets(t, "released", drain(t, q), r)
	if err := q.Release(r); err != nil { // the second receive was the last: moved now
		t.Fatal(err)
	}
	if st := q.Stats(); st.DeadLettered != 1 || st.DeadLetters != 1 {
		t.Fatalf("after Release: %+v", st)
	}
	clock.Advance(testVisibility)
	wantOffsets(t, "after the deadline", drain(t, q), p)
	clock.Advance(testVisibility - 1)
	if st := q.Stats(); st.DeadLettered != 1 {
		t.Fatalf("moved before its deadline: %+v", st)
	}
	clock.Advance(1) // the timer moves p; n goes on
	st := q.Stats()
	if st.DeadLettered != 2 || st.DeadLetters != 2 || st.Head != n {
		t.Fatalf("after p's second deadline: %+v", st)
	}
	wantOffsets(t, "the group goes on", drain(t, q), n)
	mustDelete(t, q, n)
	if err := q.Delete(p); err != nil { // a late delete of a moved message: done already
		t.Fatalf("late Delete of a dead letter: %v", err)
	}

	want := []struct {
		body, group, dedup string
		origin             uint64
	}{{"released", "", "", r}, {"poison", "g", "p", p}}
	for i, w := range want {
		body, a := recAttrs(t, d, uint64(i))
		if body != w.body || string(a.Group) != w.group || string(a.Dedup) != w.dedup || !a.HasOrigin || a.Origin != w.origin ||
			!a.HasReceives || a.Receives != 2 || a.HasDue {
			t.Errorf("dead letter %d: %q %+v, want %+v with 2 receives", i, body, a, w)
		}
	}
	got := drain(t, d)
	wantOffsets(t, "the dead letters", got, 0, 1)
	if string(got[1].Body) != "poison" || got[1].Group != "g" {
		t.Fatalf("dead letter 1: %+v", got[1])
	}
	if err := d.Close(); err == nil {
		t.Fatal("the dead-letter queue closed on its own")
	}
	mustCloseQueue(t, q)
	if _, err := d.SendWith(nil, SendOptions{}); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("the source's Close left the dead-letter queue open: %v", err)
	}

	// ChangeVisibility 0 moves too.
	q = openTestQueue(t, dir, clock, deadOpts)
	defer mustCloseQueue(t, q)
	v := mustSend(t, q, "v")
	for range 2 {
		m, _ := tryRecv(t, q)
		if m.Offset != v {
			t.Fatalf("got %+v", m)
		}
		if err := q.ChangeVisibility(v, 0); err != nil {
			t.Fatal(err)
		}
	}
	if st := q.Stats(); st.DeadLettered != 1 || st.DeadLetters != 3 {
		t.Fatalf("after ChangeVisibility 0: %+v", st)
	}
}

// TestQueueReceiveCountsSurvive: with MaxReceives, receive counts survive
// a restart (Receives goes on), and a message that used its receives up
// before the restart is moved at once, not handed out.
func TestQueueReceiveCountsSurvive(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	three := func(o *Options) { o.MaxReceives = 3 }
	q := openTestQueue(t, dir, clock, three)
	mustSend(t, q, "a")
	mustSend(t, q, "b")
	drain(t, q)
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock, three)
	got := drain(t, q)
	if len(got) != 2 || got[0].Receives != 2 || got[1].Receives != 2 {
		t.Fatalf("second run: %+v", got)
	}
	mustDelete(t, q, 1)
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock, three)
	if r := q.Recovery(); r.ReceiveCounts != 2 || r.ReceiveRecords != 4 {
		t.Fatalf("recovery: %+v", r)
	}
	got = drain(t, q)
	wantOffsets(t, "third run", got, 0)
	if got[0].Receives != 3 {
		t.Fatalf("third run: %+v", got)
	}
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock, three)
	defer mustCloseQueue(t, q)
	wantOffsets(t, "fourth run", drain(t, q))
	clock.Advance(0) // the move's timer
	if st := q.Stats(); st.DeadLettered != 1 || st.DeadLetters != 1 || st.Messages != 0 {
		t.Fatalf("fourth run: %+v", st)
	}
	if _, a := recAttrs(t, q.DeadLetter(), 0); a.Receives != 3 || a.Origin != 0 {
		t.Fatalf("dead letter: %+v", a)
	}
}

// TestQueueRedrive: Redrive moves ready dead letters back as new sends,
// oldest first, with body and group, origin = the dead-letter offset and
// receives starting again; dead letters in flight, and the rest of their
// group, stay.
func TestQueueRedrive(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openTestQueue(t, dir, clock, func(o *Options) { o.MaxReceives = 1 })
	defer mustCloseQueue(t, q)
	for _, s := range []SendOptions{{}, {Group: "g"}, {Group: "g"}, {}, {Group: "h"}} {
		mustSendWith(t, q, "m", s)
	}
	for range 4 { // g's second message waits behind its first
		clock.Advance(testVisibility)
		drain(t, q)
	}
	clock.Advance(testVisibility)
	d := q.DeadLetter()
	if st := d.Stats(); st.End != 5 {
		t.Fatalf("dead letters: %+v", st)
	}
	held, _ := tryRecv(t, d) // dead letter 0 in flight
	if held.Offset != 0 {
		t.Fatalf("held %+v", held)
	}
	if n, err := q.Redrive(2); n != 2 || err != nil {
		t.Fatalf("Redrive(2) = %d, %v", n, err)
	}
	if n, err := q.Redrive(0); n != 2 || err != nil {
		t.Fatalf("Redrive(0) = %d, %v", n, err)
	}
	if st := q.Stats(); st.Redriven != 4 || st.End != 9 || st.DeadLetters != 1 {
		t.Fatalf("stats after the redrives: %+v", st)
	}
	var origins []uint64
	var groups []string
	for off := uint64(5); off < 9; off++ {
		_, a := recAttrs(t, q, off)
		origins = append(origins, a.Origin)
		groups = append(groups, string(a.Group))
		if !a.HasOrigin || a.HasReceives {
			t.Errorf("redriven %d: %+v", off, a)
		}
	}
	if !slices.Equal(origins, []uint64{1, 2, 3, 4}) {
		t.Fatalf("redriven origins %v, want [1 2 3 4]", origins)
	}
	got := drain(t, q)
	if len(got) != 3 || got[0].Receives != 1 {
		t.Fatalf("redriven hand-outs (groups %v): %+v", groups, got)
	}
	if n, err := q.Redrive(0); n != 0 || err != nil {
		t.Fatalf("Redrive with dead letter 0 in flight: %d, %v", n, err)
	}
	if _, err := d.Redrive(1); !errors.Is(err, ErrNoDeadLetters) {
		t.Fatalf("Redrive of a dead-letter queue: %v", err)
	}
}

// TestQueueDeadLetterDirs: two queues cannot share a dead-letter queue
// (ErrLocked); a dead-letter directory equal to the queue's is refused;
// a queue without MaxReceives opens an existing sibling only.
func TestQueueDeadLetterDirs(t *testing.T) {
	clock := newFakeClock()
	root := t.TempDir()
	shared := filepath.Join(root, "dead")
	a := openTestQueue(t, filepath.Join(root, "a"), clock, func(o *Options) { o.DeadLetterDir = shared })
	defer mustCloseQueue(t, a)
	if _, err := Open(filepath.Join(root, "b"), Options{DeadLetterDir: shared, Clock: clock}); !errors.Is(err, engine.ErrLocked) {
		t.Fatalf("a second queue on the same dead-letter directory: %v, want ErrLocked", err)
	}
	b, err := Open(filepath.Join(root, "b"), Options{})
	if err != nil {
		t.Fatalf("the refused Open left b locked: %v", err)
	}
	mustCloseQueue(t, b)
	if _, err := os.Stat(filepath.Join(root, "b.dead")); err == nil {
		t.Fatal("a queue without MaxReceives created its sibling dead-letter directory")
	}
	if _, err := Open(filepath.Join(root, "c"), Options{DeadLetterDir: filepath.Join(root, "c", ".")}); !errors.Is(err, engine.ErrBadOptions) {
		t.Fatalf("DeadLetterDir equal to the queue's: %v", err)
	}
}
