package queue

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// heldStoreOptions: small segments, long deadlines, a manual clock (each
// Advance past CheckpointInterval runs the store's checkpoint).
func heldStoreOptions(clock Clock) StoreOptions {
	return StoreOptions{
		Log:        engine.Options{SegmentBytes: 16 << 10},
		Visibility: time.Hour,
		Clock:      clock,
	}
}

// churn sends, receives and deletes n messages spread over queues
// churn0..churn(k-1), running the store's checkpoint now and then.
func churn(t *testing.T, s *Store, clock *ManualClock, k, n int) {
	t.Helper()
	qs := make([]*Queue, k)
	for i := range qs {
		qs[i] = mustQueue(t, s, fmt.Sprintf("churn%d", i))
	}
	for i := range n {
		q := qs[i%k]
		body := fmt.Appendf(nil, "%s-%d-%0200d", q.Name(), i, 0)
		off, err := q.Send(body)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := receiveBody(t, q)
		if m.Offset != off {
			t.Fatalf("%s: got %d, want %d", q.Name(), m.Offset, off)
		}
		if err := q.Delete(m.Offset); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			clock.Advance(2 * time.Second)
		}
	}
	for range 4 {
		clock.Advance(2 * time.Second)
	}
}

// checkSegmentsBounded fails when the store's message log holds more
// segments than a queue may hold plus the few in use.
func checkSegmentsBounded(t *testing.T, s *Store, what string) {
	t.Helper()
	limit := DefaultMaxHeldSegments + 3
	if st := s.Stats(); st.Log.Segments > limit {
		t.Fatalf("%s: the message log holds %d segments, want at most %d (%+v)", what, st.Log.Segments, limit, st)
	}
}

// One message in flight for good in one queue while other queues churn:
// the shared message log's segments stay bounded, and the stuck message
// is still there, once.
func TestStoreStuckMessageInOneQueueDoesNotHoldTheLog(t *testing.T) {
	clock := newFakeClock()
	s := openTestStore(t, t.TempDir(), heldStoreOptions(clock))
	defer s.Close()
	stuck := mustQueue(t, s, "stuck")
	if _, err := stuck.Send([]byte("stuck")); err != nil {
		t.Fatal(err)
	}
	receiveBody(t, stuck)
	churn(t, s, clock, 20, 3000)
	checkSegmentsBounded(t, s, "a stuck message in an open queue")
	if st := stuck.Stats(); st.Messages != 1 || st.InFlight != 1 {
		t.Fatalf("the stuck queue: %+v", st)
	}
}

// A queue closed by its user, or not opened since the store opened, that
// holds old messages: the message log's segments stay bounded as other
// queues churn, and its messages are all there when it opens.
func TestStoreQueueNotOpenDoesNotHoldTheLog(t *testing.T) {
	for _, how := range []string{"closed", "reopened", "dead letters"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			o := heldStoreOptions(clock)
			if how == "dead letters" {
				o.MaxReceives = 1
				o.Visibility = time.Second
			}
			s := openTestStore(t, dir, o)
			old := mustQueue(t, s, "old")
			for i := range 5 {
				if _, err := old.Send(fmt.Appendf(nil, "old%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if how == "dead letters" {
				for range 5 {
					receiveBody(t, old)
				}
				clock.Advance(2 * time.Second) // past the deadlines: moved to old.dead
				waitFor(t, "the moves to the dead letters", func() bool { return old.DeadLetter().Stats().Messages == 5 })
			}
			switch how {
			case "closed":
				if err := old.Close(); err != nil {
					t.Fatal(err)
				}
			default:
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = openTestStore(t, dir, o)
			}
			churn(t, s, clock, 20, 3000)
			checkSegmentsBounded(t, s, "a queue not open")
			old = mustQueue(t, s, "old")
			if how == "dead letters" {
				old = old.DeadLetter()
			}
			for i := range 5 {
				if _, body := receiveBody(t, old); body != fmt.Sprintf("old%d", i) {
					t.Fatalf("%s hands out %q, want old%d", old.Name(), body, i)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A queue that holds the message log, deleted after the store's
// checkpoint found it and before it opened it: the checkpoint does not
// create it again (DeleteQueue returned; the name stays free).
func TestStoreCheckpointDoesNotCreateAHolderDeletedMeanwhile(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	s := openTestStore(t, dir, heldStoreOptions(clock))
	held := mustQueue(t, s, "held")
	if _, err := held.Send([]byte("old")); err != nil {
		t.Fatal(err)
	}
	filler := mustQueue(t, s, "filler")
	for i := 0; s.Stats().Log.Segments <= DefaultMaxHeldSegments+2; i++ {
		if _, err := filler.Send(fmt.Appendf(nil, "filler-%d-%0200d", i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, heldStoreOptions(clock)) // held is not open
	defer s.Close()
	hs := s.holders() // what the checkpoint opens
	if !slices.ContainsFunc(hs, func(sq *storeQueue) bool { return sq.name == "held" }) {
		t.Fatalf("the queue held is not among the holders (%d of them)", len(hs))
	}
	if err := s.DeleteQueue("held"); err != nil {
		t.Fatal(err)
	}
	if errs := s.openHolders(hs); len(errs) > 0 {
		t.Fatalf("openHolders: %v", errs)
	}
	if names := s.Names(); slices.Contains(names, "held") {
		t.Fatalf("Names after the checkpoint opened a holder deleted meanwhile = %v: the queue is back", names)
	}
}
