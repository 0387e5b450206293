package queue

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// TestQueueRecycledLogRestartAndPowerLoss runs a steady load (sends held
// to a backlog of a few hundred, receives, deletes, releases, abandoned
// messages that move to the dead letters) on a queue whose
// message log reuses dropped segment files (queue.Open sets
// RecycleSegments 1), with 64 KiB segments and a checkpoint every 10-50
// ms, so that the head drops segments and their files come back as new
// ones all the time; under SyncInterval and under SyncNone. Mid-run, every
// log is synced and the power fails (powerCopy: the disk as the syncs seen left
// it, unsynced bytes torn); then the queue is closed and reopened as it is. Both
// opens succeed; every send acknowledged before the sync (before the
// Close) comes back unless a Delete was called for it; no message whose
// Delete returned before then comes back; a new message takes a new
// offset.
func TestQueueRecycledLogRestartAndPowerLoss(t *testing.T) {
	var reused uint64
	defer func() {
		if !t.Failed() && reused == 0 {
			t.Error("the message log reused no dropped file in any round")
		}
	}()
	for round, policy := range []engine.SyncPolicy{engine.SyncInterval, engine.SyncNone, engine.SyncInterval, engine.SyncNone} {
		rng := rand.New(rand.NewPCG(uint64(round), uint64(time.Now().UnixNano())))
		o := wlOptions(policy)
		o.Log.SegmentBytes = 64 << 10
		o.Log.SyncInterval = time.Duration(5+rng.IntN(20)) * time.Millisecond
		o.CheckpointInterval = time.Duration(10+rng.IntN(41)) * time.Millisecond
		dir := t.TempDir()
		sd := newSyncDisk(t, dir)
		q, err := Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var events []wlEvent
		emit := func(e wlEvent) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
		stop := make(chan struct{})
		wait := steadyLoad(q, stop, emit, func(s string) { t.Error(s) })
		time.Sleep(time.Duration(700+rng.IntN(300)) * time.Millisecond)

		// Power failure: what was acknowledged before every log was
		// synced must survive it.
		mu.Lock()
		synced := len(events)
		mu.Unlock()
		for _, l := range []recordLog{q.log, q.dels, q.recvs, q.DeadLetter().log, q.DeadLetter().dels} {
			if l == nil {
				continue
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		disk := t.TempDir()
		var dst syncDiskStats
		powerCopy(t, rng, sd, disk, &dst)
		mu.Lock()
		copied := len(events)
		mu.Unlock()

		time.Sleep(time.Duration(50+rng.IntN(100)) * time.Millisecond)
		close(stop)
		wait()
		st := q.log.Stats()
		if err := q.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		all := append([]wlEvent(nil), events...)
		reused += st.Recycled

		check := func(what, dir string, l *wlLedger) {
			t.Helper()
			o := o
			o.Log.Sync = engine.SyncNone
			o.Visibility = time.Minute
			q, err := Open(dir, o)
			if err != nil {
				t.Fatalf("round %d (%s): open after the %s: %v", round, policy, what, err)
			}
			rec := drainAll(t, q, l)
			checkRecovered(t, l, rec)
			for _, d := range rec.damaged {
				if _, was := l.sentAt[d.off]; was && !d.dead {
					t.Errorf("round %d (%s): after the %s, acknowledged message %d is damaged: %s", round, policy, what, d.off, d.why)
				}
			}
			if off := mustSend(t, q, "after"); off <= l.maxSent {
				t.Errorf("round %d (%s): after the %s, a new message took offset %d, acknowledged before", round, policy, what, off)
			}
			mustCloseQueue(t, q)
			q, err = Open(dir, o)
			if err != nil {
				t.Fatalf("round %d (%s): second open after the %s: %v", round, policy, what, err)
			}
			mustCloseQueue(t, q)
			t.Logf("round %d (%s, checkpoint %v): after the %s, %d from the queue, %d dead letters, %d damaged; %d segments from reused files, %d events",
				round, policy, o.CheckpointInterval, what, len(rec.source), len(rec.dead), len(rec.damaged), st.Recycled, len(all))
		}
		check("power failure", disk, newLedger(all[:copied], synced))
		check("restart", dir, newLedger(all, len(all)))
	}
}

// steadyLoad is a steady state of the queue: a sender that waits while
// more than 300 messages are not deleted, and three receivers that delete
// most of what they get (one by one or in batches), release some and
// abandon a few (which come back, and after MaxReceives go to the dead
// letters), so that the head moves and checkpoints drop segments. Events
// as in workload.
func steadyLoad(q *Queue, stop <-chan struct{}, emit func(wlEvent), fail func(string)) (wait func()) {
	var wg sync.WaitGroup
	stopped, check := workloadChecks(stop, fail)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint64(1); !stopped(); id++ {
			for q.Stats().Messages > 300 && !stopped() {
				time.Sleep(100 * time.Microsecond)
			}
			off, err := q.Send(wlBody(id))
			if !check("Send", err) {
				return
			}
			emit(wlEvent{evSent, off, id})
		}
	}()
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			var batch []wlEvent
			for !stopped() {
				m, ok, err := q.TryReceive()
				if !ok {
					if err != nil {
						check("TryReceive", err)
						return
					}
					time.Sleep(50 * time.Microsecond)
					continue
				}
				id, good := wlID(m.Body)
				if err != nil || !good {
					fail("a damaged or foreign message handed out")
					return
				}
				emit(wlEvent{evHanded, m.Offset, id})
				switch p := rng.IntN(100); {
				case p < 70:
					emit(wlEvent{evDeleting, m.Offset, id})
					if !check("Delete", q.Delete(m.Offset)) {
						return
					}
					emit(wlEvent{evDeleted, m.Offset, id})
				case p < 95:
					batch = append(batch, wlEvent{evDeleting, m.Offset, id})
					if len(batch) < 4 {
						continue
					}
					if !deleteBatch(q, batch, emit, check) {
						return
					}
					batch = batch[:0]
				case p < 98:
					if err := q.Release(m.Offset); err != nil && !errors.Is(err, ErrNotInFlight) {
						check("Release", err)
					}
				}
			}
		}()
	}
	return wg.Wait
}
