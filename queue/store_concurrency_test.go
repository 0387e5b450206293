package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// waitGroupWithin waits for wg, failing the test if it takes longer than d
// (a goroutine stuck for good).
func waitGroupWithin(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still running after %v", what, d)
	}
}

// Store.Close while queues open, send, receive and are deleted: every
// blocked receiver returns, every call after returns ErrClosed, nothing
// hangs or races.
func TestStoreCloseDuringQueueOpensEndsEveryReceiver(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		dir := t.TempDir()
		s := openTestStore(t, dir, StoreOptions{})
		var wg sync.WaitGroup
		started := make(chan struct{}, 16)
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				started <- struct{}{}
				name := fmt.Sprintf("q%d", g%8)
				for k := 0; ; k++ {
					q, err := s.Queue(name)
					if err != nil {
						return // closed, or deleted while it opened
					}
					if _, err := q.Send([]byte(name)); err != nil {
						continue // deleted under it
					}
					switch k % 4 {
					case 0:
						if g == 0 {
							_ = s.DeleteQueue(name)
						}
					case 1:
						_ = s.Stats()
						_ = s.Names()
					}
					m, err := q.Receive(context.Background())
					if err != nil {
						if !errors.Is(err, engine.ErrClosed) {
							t.Errorf("Receive: %v", err)
						}
						continue
					}
					if string(m.Body) != name {
						t.Errorf("queue %s hands out %q", name, m.Body)
					}
				}
			}()
		}
		for range 16 {
			<-started
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		if err := s.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			t.Logf("round %d: Close: %v", round, err)
		}
		waitGroupWithin(t, &wg, 10*time.Second, fmt.Sprintf("round %d: the store's users after Close", round))
		if _, err := s.Queue("q0"); !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("Queue after Close = %v, want ErrClosed", err)
		}
	}
}

// Many goroutines asking for one new name get one queue, under one id,
// and the store holds one queue of that name after a reopen.
func TestStoreQueueOfOneNewNameFromManyGoroutinesIsOneQueue(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	qs := make([]*Queue, 32)
	var wg sync.WaitGroup
	for i := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := s.Queue("one")
			if err != nil {
				t.Error(err)
				return
			}
			qs[i] = q
			if _, err := q.Send(fmt.Appendf(nil, "m%d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, q := range qs {
		if q != qs[0] {
			t.Fatal("Queue of one name handed out two queues")
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	if st := s.Stats(); st.Queues != 1 || st.Messages != 32 {
		t.Fatalf("after reopen: %d queues, %d messages, want 1 and 32", st.Queues, st.Messages)
	}
}

// A queue whose open is under way when Store.Close runs is closed too:
// its receivers return ErrClosed rather than wait on closed logs.
func TestStoreCloseEndsReceiversOfQueuesOpenedDuringIt(t *testing.T) {
	rounds := 10
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		s := openTestStore(t, t.TempDir(), StoreOptions{})
		var wg, openers sync.WaitGroup
		for g := range 4 {
			openers.Add(1)
			go func() {
				defer openers.Done()
				for k := 0; ; k++ {
					q, err := s.Queue(fmt.Sprintf("q%d-%d", g, k))
					if err != nil {
						return
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := q.Receive(context.Background()); !errors.Is(err, engine.ErrClosed) {
							t.Errorf("Receive = %v, want ErrClosed", err)
						}
					}()
				}
			}()
		}
		time.Sleep(time.Duration(1+round%4) * time.Millisecond)
		_ = s.Close()
		openers.Wait()
		waitGroupWithin(t, &wg, 10*time.Second, fmt.Sprintf("round %d: receivers after Close", round))
	}
}
