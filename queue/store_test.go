package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

func openTestStore(t *testing.T, dir string, o StoreOptions) *Store {
	t.Helper()
	s, err := OpenStore(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustQueue(t *testing.T, s *Store, name string) *Queue {
	t.Helper()
	q, err := s.Queue(name)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// receiveBody receives one message from q within a short wait and
// returns its body, copied.
func receiveBody(t *testing.T, q *Queue) (Message, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := q.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive of queue %q: %v", q.Name(), err)
	}
	return m, string(m.Body)
}

func TestStoreQueuesKeepTheirOwnMessages(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	a, b := mustQueue(t, s, "a"), mustQueue(t, s, "b")
	for i := range 10 {
		if _, err := a.Send(fmt.Appendf(nil, "a%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Send(fmt.Appendf(nil, "b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		m, body := receiveBody(t, a)
		if want := fmt.Sprintf("a%d", i); body != want || m.Offset != uint64(i) {
			t.Fatalf("a: message %d = %q at %d, want %q at %d", i, body, m.Offset, want, i)
		}
		if i%2 == 0 {
			if err := a.Delete(m.Offset); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := b.Stats(); st.Messages != 10 {
		t.Fatalf("b holds %d messages, want 10", st.Messages)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send([]byte("x")); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Send after the store's Close = %v, want ErrClosed", err)
	}

	s = openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	if got := s.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Names = %q", got)
	}
	a, b = mustQueue(t, s, "a"), mustQueue(t, s, "b")
	for i := 1; i < 10; i += 2 {
		m, body := receiveBody(t, a)
		if want := fmt.Sprintf("a%d", i); body != want {
			t.Fatalf("a after reopen: %q, want %q", body, want)
		}
		if err := a.Delete(m.Offset); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := a.TryReceive(); ok || err != nil {
		t.Fatalf("a after every delete: TryReceive = %v, %v", ok, err)
	}
	for i := range 10 {
		_, body := receiveBody(t, b)
		if want := fmt.Sprintf("b%d", i); body != want {
			t.Fatalf("b after reopen: %q, want %q", body, want)
		}
	}
	st := s.Stats()
	if st.Queues != 2 || st.Messages != 10 || len(st.Deepest) != 2 || st.Deepest[0].Name != "b" {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestStoreDeleteQueueStartsTheNameAgainEmpty(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	a := mustQueue(t, s, "a")
	for range 5 {
		if _, err := a.Send([]byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	b := mustQueue(t, s, "b")
	go func() { _, err := b.Receive(context.Background()); done <- err }()
	if err := s.DeleteQueue("b"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Receive blocked on a deleted queue = %v, want ErrClosed", err)
	}
	if err := s.DeleteQueue("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteQueue("a"); !errors.Is(err, ErrNoQueue) {
		t.Fatalf("second DeleteQueue = %v, want ErrNoQueue", err)
	}
	a = mustQueue(t, s, "a")
	if _, ok, _ := a.TryReceive(); ok {
		t.Fatal("a queue created again under a deleted name hands out an old message")
	}
	if _, err := a.Send([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	if got := s.Names(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Names after reopen = %q", got)
	}
	a = mustQueue(t, s, "a")
	_, body := receiveBody(t, a)
	if body != "new" {
		t.Fatalf("reopened a hands out %q, want new", body)
	}
	if _, ok, _ := a.TryReceive(); ok {
		t.Fatal("reopened a hands out a message of the deleted queue")
	}
}

func TestStoreRefusesBadQueueNames(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{})
	defer s.Close()
	long := string(make([]byte, MaxQueueNameBytes+1))
	for _, name := range []string{"", "a/b", "a\x00b", "\xff", long} {
		if _, err := s.Queue(name); !errors.Is(err, ErrBadQueueName) {
			t.Errorf("Queue(%q) = %v, want ErrBadQueueName", name, err)
		}
	}
}

func TestOpenStoreTwiceIsLocked(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	if _, err := OpenStore(dir, StoreOptions{}); !errors.Is(err, engine.ErrLocked) {
		t.Fatalf("second OpenStore = %v, want ErrLocked", err)
	}
}

// storeSegments counts the segment files of the store's message log.
func storeSegments(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, storeMessagesDir))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			n++
		}
	}
	return n
}

// churnStore sends, receives and deletes 3,000 messages of 1,000 bytes
// through busy, with a store checkpoint every 100, and returns the most
// segments the store's message log held.
func churnStore(t *testing.T, s *Store, busy *Queue, dir string) int {
	t.Helper()
	body := make([]byte, 1000)
	most := 0
	for i := range 3000 {
		if _, err := busy.Send(body); err != nil {
			t.Fatal(err)
		}
		m, ok, err := busy.TryReceive()
		if err != nil || !ok {
			t.Fatalf("busy: TryReceive %d: %v, %v", i, ok, err)
		}
		if err := busy.Delete(m.Offset); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			if err := s.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			most = max(most, storeSegments(t, dir))
		}
	}
	return most
}

func TestStoreStuckMessageDoesNotHoldTheSharedLog(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{Log: engine.Options{SegmentBytes: 64 << 10}})
	defer s.Close()
	stuck, busy := mustQueue(t, s, "stuck"), mustQueue(t, s, "busy")
	if _, err := stuck.Send([]byte("never deleted")); err != nil {
		t.Fatal(err)
	}
	held, _ := receiveBody(t, stuck)
	most := churnStore(t, s, busy, dir)
	// 3 MB went through 64 KiB segments: about 46 of them.
	if limit := DefaultMaxHeldSegments + 4; most > limit {
		t.Fatalf("the shared message log held %d segments, want at most %d", most, limit)
	}
	if err := stuck.Delete(held.Offset); err != nil {
		t.Fatalf("Delete of the moved message by the offset it was handed out at: %v", err)
	}
	if st := stuck.Stats(); st.Messages != 0 || st.Moved == 0 {
		t.Fatalf("stuck queue after its delete: %d messages, %d moved", st.Messages, st.Moved)
	}
}

func TestStoreQueueNotOpenedSinceReopenDoesNotHoldTheSharedLog(t *testing.T) {
	dir := t.TempDir()
	o := StoreOptions{Log: engine.Options{SegmentBytes: 64 << 10}}
	s := openTestStore(t, dir, o)
	if _, err := mustQueue(t, s, "idle").Send([]byte("waits")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, o)
	defer s.Close()
	busy := mustQueue(t, s, "busy")
	most := churnStore(t, s, busy, dir)
	if limit := DefaultMaxHeldSegments + 4; most > limit {
		t.Fatalf("the shared message log held %d segments, want at most %d", most, limit)
	}
	_, body2 := receiveBody(t, mustQueue(t, s, "idle"))
	if body2 != "waits" {
		t.Fatalf("idle queue hands out %q", body2)
	}
}

// A queue created after the names log lost its records takes a new id:
// never the id of a lost queue whose head checkpoint survives.
func TestStoreNewQueueNeverTakesTheIDOfALostQueue(t *testing.T) {
	dir := t.TempDir()
	o := StoreOptions{Log: engine.Options{SegmentBytes: 4 << 10}}
	s := openTestStore(t, dir, o)
	a := mustQueue(t, s, "a")
	body := make([]byte, 500)
	for range 100 {
		if _, err := a.Send(body); err != nil {
			t.Fatal(err)
		}
		m, _ := receiveBody(t, a)
		if err := a.Delete(m.Offset); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Everything but the heads is gone.
	for _, sub := range []string{storeNamesDir, storeMessagesDir, storeDeletesDir, storeReceivesDir} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	s = openTestStore(t, dir, o)
	defer s.Close()
	b := mustQueue(t, s, "b")
	off, err := b.Send([]byte("b's first"))
	if err != nil {
		t.Fatal(err)
	}
	if rec := b.Recovery(); off != 0 || rec.HeadFrom != "log start (no checkpoint)" {
		t.Fatalf("new queue b: first send at %d, head from %q; want 0 and no checkpoint", off, rec.HeadFrom)
	}
	// Had b taken a's id, a's head record (head 100) would be b's at the
	// next open if b's own were not written first (a crash): b's first
	// 100 messages would count as deleted.
	if lost := a.st.sq.id; b.st.sq.id == lost {
		t.Fatalf("new queue b took id %d, the id of lost queue a, whose head survives", lost)
	}
}

func TestStorePauseDropsKeepsSharedSegmentsUntilResume(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{Log: engine.Options{SegmentBytes: 4 << 10}})
	defer s.Close()
	q := mustQueue(t, s, "q")
	resume := s.PauseDrops()
	body := make([]byte, 500)
	for range 100 {
		if _, err := q.Send(body); err != nil {
			t.Fatal(err)
		}
		m, _ := receiveBody(t, q)
		if err := q.Delete(m.Offset); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	paused := storeSegments(t, dir)
	resume()
	resume() // a second call does nothing
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if after := storeSegments(t, dir); paused < 10 || after > 3 {
		t.Fatalf("segments: %d while paused (want the ~13 written), %d after resume (want at most 3)", paused, after)
	}
}

func TestStoreHeadsCompactionKeepsEveryQueuesNewestHead(t *testing.T) {
	oldSeg, oldSlack := headsSegmentBytes, headsSlack
	headsSegmentBytes, headsSlack = 4<<10, 8<<10
	t.Cleanup(func() { headsSegmentBytes, headsSlack = oldSeg, oldSlack })
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	qs := []*Queue{mustQueue(t, s, "a"), mustQueue(t, s, "b"), mustQueue(t, s, "c")}
	for _, q := range qs {
		for range 300 {
			if _, err := q.Send([]byte("m")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each round deletes one message of each queue and checkpoints:
	// 900 head records, about 55 KB, through 4 KiB segments.
	for i := range 300 {
		for _, q := range qs[:2+i%2] {
			m, _ := receiveBody(t, q)
			if err := q.Delete(m.Offset); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	st := s.heads.Stats()
	want := map[string]uint64{}
	for _, q := range qs {
		want[q.Name()] = q.Stats().Messages
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Segments > 4 {
		t.Fatalf("the heads log kept %d segments, want the compaction to hold it to a few", st.Segments)
	}
	s = openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	for name, n := range want {
		q := mustQueue(t, s, name)
		if got := q.Stats().Messages; got != n {
			t.Errorf("queue %s holds %d messages after reopen, want %d", name, got, n)
		}
		if rec := q.Recovery(); rec.HeadFrom != "checkpoint" {
			t.Errorf("queue %s: head from %q", name, rec.HeadFrom)
		}
	}
}

// TestStoreDropsSegmentsTheHeadLeavesBeforeTheTick: a queue of a store
// whose head leaves the oldest segment of the message log has that
// segment dropped within an eighth of CheckpointInterval, as a queue that
// owns its directory has, rather than at the store's next tick: a busy
// queue keeps a few segments (and reuses their files), not a tick's
// worth of new ones.
func TestStoreDropsSegmentsTheHeadLeavesBeforeTheTick(t *testing.T) {
	clock := NewManualClock(time.Unix(1_000_000, 0))
	const interval = time.Hour
	s := openTestStore(t, t.TempDir(), StoreOptions{
		Log:                engine.Options{SegmentBytes: 64 << 10, Sync: engine.SyncNone},
		CheckpointInterval: interval,
		Clock:              clock,
	})
	defer s.Close()
	q := mustQueue(t, s, "busy")
	body := make([]byte, 1000)
	// Six rounds of about a segment and a half each, the clock moved an
	// eighth of the interval after each: the store's tick (at the full
	// interval) never comes.
	for round := range 6 {
		for range 100 {
			if _, err := q.Send(body); err != nil {
				t.Fatal(err)
			}
			m, ok, err := q.TryReceive()
			if err != nil || !ok {
				t.Fatalf("round %d: receive: %v, %v", round, ok, err)
			}
			if err := q.Delete(m.Offset); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(interval/8 + time.Second)
		waitFor(t, fmt.Sprintf("round %d: the segments behind the head dropped", round), func() bool {
			return s.Stats().Log.Segments <= 3
		})
	}
}
