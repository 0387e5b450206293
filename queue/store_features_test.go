package queue

import (
	"testing"
	"time"
)

// Dedup ids, delays, groups and Redrive through queues of a store, with
// a reopen between: a dedup id sent before the reopen is still known,
// only in its own queue; a delayed message waits; a group hands out in
// order; dead letters come back with Redrive.
func TestStoreQueueFeaturesAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	o := StoreOptions{Clock: clock, Visibility: time.Second, MaxReceives: 1}
	s := openTestStore(t, dir, o)
	a, b := mustQueue(t, s, "a"), mustQueue(t, s, "b")
	offA, err := a.SendWith([]byte("a-dedup"), SendOptions{DedupID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SendWith([]byte("b-dedup"), SendOptions{DedupID: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SendWith([]byte("later"), SendOptions{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"g1", "g2"} {
		if _, err := b.SendWith([]byte(body), SendOptions{Group: "g"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTestStore(t, dir, o)
	defer s.Close()
	a, b = mustQueue(t, s, "a"), mustQueue(t, s, "b")
	if off, err := a.SendWith([]byte("a-dedup again"), SendOptions{DedupID: "x"}); err != nil || off != offA {
		t.Fatalf("a second send of dedup id x after reopen = %d, %v, want %d", off, err, offA)
	}
	if _, body := receiveBody(t, a); body != "a-dedup" {
		t.Fatalf("a hands out %q, want a-dedup", body)
	}
	if m, ok, _ := a.TryReceive(); ok {
		t.Fatalf("a hands out %q before its delay", m.Body)
	}
	for _, want := range []string{"b-dedup", "g1"} {
		if _, body := receiveBody(t, b); body != want {
			t.Fatalf("b hands out %q, want %q", body, want)
		}
	}
	if m, ok, _ := b.TryReceive(); ok {
		t.Fatalf("b hands out %q while g1 is in flight", m.Body)
	}
	clock.Advance(2 * time.Second) // b-dedup and g1 expire: MaxReceives 1 moves them
	waitFor(t, "the moves to b.dead", func() bool { return b.DeadLetter().Stats().Messages == 2 })
	if n, err := b.Redrive(10); err != nil || n != 2 {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	got := map[string]bool{}
	for range 3 {
		m, body := receiveBody(t, b)
		got[body] = true
		if err := b.Delete(m.Offset); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"b-dedup", "g1", "g2"} {
		if !got[want] {
			t.Fatalf("b after Redrive handed out %v, want %s among them", got, want)
		}
	}
}
