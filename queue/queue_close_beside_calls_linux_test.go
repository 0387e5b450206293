package queue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// TestQueueCloseBesideEveryCall: Close (which closes the message log
// before the dead-letter queue and the side logs) while senders,
// receivers that delete or release (moves to the dead letters with
// MaxReceives 2), Redrive, Stats and a snapshot reader run. Every call
// either works or says the queue is closed; the reopened queue holds
// every message whose Send returned nil and whose Delete did not, in
// itself or in its dead letters, and hands out no message whose Delete
// returned nil.
func TestQueueCloseBesideEveryCall(t *testing.T) {
	for _, policy := range []engine.SyncPolicy{engine.SyncNone, engine.SyncInterval, engine.SyncAlways} {
		t.Run(fmt.Sprint(policy), func(t *testing.T) {
			dir := t.TempDir()
			opts := func(o *Options) {
				o.Log = engine.Options{SegmentBytes: 64 << 10, Sync: policy, SyncInterval: time.Millisecond}
				o.CheckpointInterval = 2 * time.Millisecond
				o.Clock = nil
				o.MaxReceives = 2
				o.Visibility = time.Hour
			}
			m := newAckModel(300)
			for round := range 8 {
				closeRound(t, dir, opts, m, uint64(round))
			}
			q := openTestQueue(t, dir, newFakeClock(), opts)
			defer mustCloseQueue(t, q)
			m.check(t, q)
		})
	}
}

// closeRound opens the queue, runs the load, closes it beside the load,
// then reopens it and checks m against it (leaving everything ready for
// the next round: what it receives in the check is released again by
// the reopen after).
func closeRound(t *testing.T, dir string, opts func(*Options), m *ackModel, seed uint64) {
	q := openTestQueue(t, dir, newFakeClock(), opts)
	var (
		mu      sync.Mutex // guards m
		wg      sync.WaitGroup
		stop    atomic.Bool
		failure error
		fmu     sync.Mutex
	)
	fail := func(err error) {
		fmu.Lock()
		if failure == nil {
			failure = err
		}
		fmu.Unlock()
	}
	closed := func(err error) bool { return errors.Is(err, engine.ErrClosed) }
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				mu.Lock()
				id := m.next
				m.next++
				mu.Unlock()
				off, err := q.Send(idBody(id, m.size))
				if err != nil {
					if !closed(err) {
						fail(fmt.Errorf("sender %d: Send: %w", s, err))
					}
					return
				}
				mu.Lock()
				m.sent[id], m.offID[off] = off, id
				mu.Unlock()
			}
		}()
	}
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(r)))
			for !stop.Load() {
				msg, ok, err := q.TryReceive()
				if err != nil {
					if !closed(err) {
						fail(fmt.Errorf("receiver: TryReceive: %w", err))
					}
					return
				}
				if !ok {
					time.Sleep(50 * time.Microsecond)
					continue
				}
				id := bodyID(msg.Body)
				if id < 0 {
					fail(fmt.Errorf("received %d: a body never sent", msg.Offset))
					return
				}
				mu.Lock()
				gone := m.deleted[id]
				mu.Unlock()
				if gone {
					fail(fmt.Errorf("received %d (message %d) after its Delete returned nil", msg.Offset, id))
					return
				}
				if rng.IntN(3) == 0 {
					if err := q.Release(msg.Offset); err != nil && !closed(err) {
						fail(fmt.Errorf("Release(%d): %w", msg.Offset, err))
						return
					}
					continue
				}
				err = q.Delete(msg.Offset)
				switch {
				case err == nil:
					mu.Lock()
					m.deleted[id] = true
					mu.Unlock()
				case closed(err):
					return
				default:
					fail(fmt.Errorf("Delete(%d): %w", msg.Offset, err))
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if _, err := q.Redrive(5); err != nil {
				if !closed(err) {
					fail(fmt.Errorf("Redrive: %w", err))
				}
				return
			}
			_ = q.Stats()
			time.Sleep(200 * time.Microsecond)
		}
	}()
	time.Sleep(time.Duration(20+seed*7) * time.Millisecond)
	err := q.Close()
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("round %d: Close beside the load: %v", seed, err)
	}
	if failure != nil {
		t.Fatalf("round %d: %v", seed, failure)
	}
	q = openTestQueue(t, dir, newFakeClock(), opts)
	if r := q.Recovery(); r.HeadFrom != "checkpoint" {
		t.Errorf("round %d: reopened with head from %q, want the final checkpoint's", seed, r.HeadFrom)
	}
	st := q.Stats()
	if st.Log.Recovery.Clean != true {
		t.Errorf("round %d: the message log was not closed clean: %+v", seed, st.Log.Recovery)
	}
	mustCloseQueue(t, q)
}
