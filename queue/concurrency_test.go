package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// Many receivers and a sender race while the clock moves and deadlines
// expire; some receivers delete, others let the deadline pass. No message
// may be handed to two receivers while its deadline has not passed, and
// Receives must count each hand-out once.
func TestQueueConcurrentReceivers(t *testing.T) {
	const (
		messages  = 3000
		receivers = 16
	)
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	type handout struct {
		at, deadline time.Time
		receives     int
	}
	var (
		mu   sync.Mutex
		seen = map[uint64][]handout{}
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() { // the sender
		defer wg.Done()
		for i := range messages {
			if _, err := q.Send([]byte(fmt.Sprint(i))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for r := range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for {
				m, err := q.Receive(ctx)
				if errors.Is(err, context.Canceled) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[m.Offset] = append(seen[m.Offset], handout{m.Deadline.Add(-testVisibility), m.Deadline, m.Receives})
				mu.Unlock()
				if rng.IntN(10) < 3 {
					continue // let the deadline pass
				}
				if err := q.Delete(m.Offset); err != nil {
					t.Error(err)
					return
				}
				if q.Stats().Deleted == messages { // repeated deletes do not count
					stop()
				}
			}
		}()
	}
	for ctx.Err() == nil && !t.Failed() { // the clock
		clock.Advance(time.Duration(rand.Int64N(int64(testVisibility / 4))))
		runtime.Gosched() // lets the receivers run between jumps
	}
	wg.Wait()

	if len(seen) != messages {
		t.Fatalf("%d messages handed out, want %d", len(seen), messages)
	}
	redelivered := 0
	for off, hs := range seen {
		slices.SortFunc(hs, func(a, b handout) int { return a.receives - b.receives })
		for i, h := range hs {
			if h.receives != i+1 {
				t.Fatalf("offset %d: hand-out %d has Receives %d", off, i+1, h.receives)
			}
			if i > 0 && h.at.Before(hs[i-1].deadline) {
				t.Fatalf("offset %d handed out at %v, before the previous deadline %v", off, h.at, hs[i-1].deadline)
			}
		}
		redelivered += len(hs) - 1
	}
	st := q.Stats()
	// The head reaches the end: past the messages, and past the copies of
	// those moved out of held segments (Options.MaxHeldSegments).
	if st.Head != st.End || st.Messages != 0 || st.InFlight != 0 || st.ReadyAgain != 0 || st.Redelivered != uint64(redelivered) {
		t.Fatalf("stats at the end: %+v (redelivered %d)", st, redelivered)
	}
	t.Logf("%d messages, %d redeliveries", messages, redelivered)
}
