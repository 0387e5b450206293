package queue

import (
	"errors"
	"fmt"
	"testing"
)

// sendN sends n messages "<prefix><i>" to q.
func sendN(t *testing.T, q *Queue, prefix string, n int) {
	t.Helper()
	for i := range n {
		if _, err := q.Send(fmt.Appendf(nil, "%s%d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStatStoreReadsBesideTheOwner(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	a, b := mustQueue(t, s, "a"), mustQueue(t, s, "b")
	sendN(t, a, "a", 5)
	sendN(t, b, "b", 3)
	for _, off := range []uint64{1, 3} {
		if err := a.Discard(off); err != nil {
			t.Fatal(err)
		}
	}
	st, err := StatStore(dir) // the store is open: no lock may be taken
	if err != nil {
		t.Fatal(err)
	}
	if st.Queues != 2 || st.Open != 0 || st.Recovery.Queues != 2 {
		t.Fatalf("queues %d open %d recovery %+v, want 2, 0, 2", st.Queues, st.Open, st.Recovery)
	}
	// From outside, a queue counts from its checkpointed head (none yet).
	if len(st.Deepest) != 2 || st.Deepest[0] != (QueueDepth{Name: "a", Messages: 5}) || st.Deepest[1] != (QueueDepth{Name: "b", Messages: 3}) {
		t.Fatalf("deepest %+v", st.Deepest)
	}
	qs, err := StatStoreQueue(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	if qs.End != 5 || qs.Head != 0 || qs.Messages != 3 || qs.Deleted != 2 || qs.DeleteRecords != 2 {
		t.Fatalf("queue a: %+v, want end 5, head 0, 3 messages, 2 deleted by 2 records", qs)
	}
	if _, err := StatStoreQueue(dir, "c"); !errors.Is(err, ErrNoQueue) {
		t.Fatalf("a queue the store lacks: %v, want ErrNoQueue", err)
	}
}

func TestStoreMessagesListsTheMessagesNotDeleted(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	a, b := mustQueue(t, s, "a"), mustQueue(t, s, "b")
	sendN(t, a, "a", 4)
	sendN(t, b, "b", 2)
	if err := a.Discard(2); err != nil {
		t.Fatal(err)
	}
	list := func() string {
		var got []string
		err := StoreMessages(dir, "a", func(m Stored) bool {
			if m.Err != nil {
				t.Fatalf("offset %d: %v", m.Offset, m.Err)
			}
			got = append(got, fmt.Sprintf("%d:%s", m.Offset, m.Body))
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(got)
	}
	if got, want := list(), "[0:a0 1:a1 3:a3]"; got != want {
		t.Fatalf("beside the owner: %s, want %s", got, want)
	}
	if err := a.Discard(0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // the head moves past 0
		t.Fatal(err)
	}
	if got, want := list(), "[1:a1 3:a3]"; got != want {
		t.Fatalf("after close: %s, want %s", got, want)
	}
}

func TestStatStoreOfADirectoryWithoutAStore(t *testing.T) {
	if _, err := StatStore(t.TempDir()); !errors.Is(err, ErrNotStore) {
		t.Fatalf("got %v, want ErrNotStore", err)
	}
}

func TestStoreDepthsListsEveryQueue(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{})
	defer s.Close()
	n := StoreStatsDeepest + 5
	for i := range n {
		sendN(t, mustQueue(t, s, fmt.Sprintf("q%02d", i)), "m", i)
	}
	d := s.Depths()
	if len(d) != n || len(s.Stats().Deepest) != StoreStatsDeepest {
		t.Fatalf("Depths lists %d queues, Stats %d; want %d and %d", len(d), len(s.Stats().Deepest), n, StoreStatsDeepest)
	}
	for i, x := range d {
		if want := (QueueDepth{Name: fmt.Sprintf("q%02d", n-1-i), Messages: uint64(n - 1 - i)}); x != want {
			t.Fatalf("depth %d: %+v, want %+v", i, x, want)
		}
	}
	if !s.Has("q00") || s.Has("nope") || len(s.Names()) != n {
		t.Fatal("Has answers wrong, or created a queue")
	}
}

func TestStoreReaderReadsEveryQueueFromOneLook(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	a, b := mustQueue(t, s, "a"), mustQueue(t, s, "b")
	sendN(t, a, "a", 3)
	sendN(t, b, "b", 2)
	if err := b.Discard(0); err != nil {
		t.Fatal(err)
	}
	r, err := ReadStore(dir) // beside the owner
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sendN(t, a, "later", 1) // after the look: not seen
	if got := fmt.Sprint(r.Names()); got != "[a b]" {
		t.Fatalf("names %s", got)
	}
	list := func(name string) string {
		var got []string
		if err := r.Messages(name, func(m Stored) bool {
			got = append(got, fmt.Sprintf("%d:%s", m.Offset, m.Body))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(got)
	}
	if got, want := list("a"), "[0:a0 1:a1 2:a2]"; got != want {
		t.Fatalf("a: %s, want %s", got, want)
	}
	if got, want := list("b"), "[1:b1]"; got != want {
		t.Fatalf("b: %s, want %s", got, want)
	}
	if err := r.Messages("c", func(Stored) bool { return true }); !errors.Is(err, ErrNoQueue) {
		t.Fatalf("a queue the store lacks: %v, want ErrNoQueue", err)
	}
}
