package queue

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// TestQueuePowerLoss: the workload runs under SyncAlways (MaxReceives 2:
// moves to the dead letters and redrives all the time) and the power
// fails at a random moment. The disk after the failure is built from the
// syncs the queue really made (syncDisk): every file as its last
// fdatasync left it, torn sector by sector towards what it holds now;
// every directory as its last directory sync left it, or with the entries
// made since (some of the newest segments never synced lost).
//
// Promise: every Send acknowledged before the failure comes back, in the
// queue or in its dead letters, unless a Delete was called for it; no
// message whose Delete returned comes back to the queue; damaged records
// are only ones never acknowledged; the reopened queue goes on.
func TestQueuePowerLoss(t *testing.T) {
	t.Parallel()
	var st syncDiskStats
	for round := range *crashRounds {
		powerLossRound(t, uint64(round), &st)
	}
	t.Log(st)
	if !t.Failed() && st.SectorsOld == 0 {
		t.Errorf("no image kept an unsynced sector old: the disk never tore (%v)", st)
	}
}

func powerLossRound(t *testing.T, round uint64, st *syncDiskStats) {
	rng := rand.New(rand.NewPCG(round, uint64(time.Now().UnixNano())))
	dir := t.TempDir()
	sd := newSyncDisk(t, dir)
	q, err := Open(dir, wlOptions(engine.SyncAlways))
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
	wait := workload(q, stop, emit, func(s string) { t.Error(s) })
	time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	mu.Lock()
	acked := len(events) // acknowledged before the failure
	mu.Unlock()

	disk := t.TempDir()
	powerCopy(t, rng, sd, disk, st)
	mu.Lock()
	ended := len(events) // deletes called before may be on the disk
	mu.Unlock()
	close(stop)
	q.Close()
	wait()
	l := newLedger(events[:ended], acked)

	o := wlOptions(engine.SyncNone) // the check's own deletes need no sync
	o.Visibility = time.Minute
	q, err = Open(disk, o)
	if err != nil {
		t.Fatalf("round %d: open after the power failure: %v", round, err)
	}
	r := q.Recovery()
	rec := drainAll(t, q, l)
	checkRecovered(t, l, rec)
	for _, d := range rec.damaged {
		if _, was := l.sentAt[d.off]; was && !d.dead {
			t.Errorf("round %d: acknowledged message %d is damaged: %s", round, d.off, d.why)
		}
	}
	if off := mustSend(t, q, "after"); off <= l.maxSent {
		t.Errorf("round %d: a new message took offset %d, acknowledged before the failure", round, off)
	}
	mustCloseQueue(t, q)
	q, err = Open(disk, o)
	if err != nil {
		t.Fatalf("round %d: second open: %v", round, err)
	}
	// The damaged delete records the first open reported and stepped over
	// stay in the delete log until the head passes their segment (the
	// delete log's segments are a quarter of the message log's, so the
	// check's own deletes may take it past them): the second open reports
	// some or all of them again, and nothing else.
	if r2 := q.Recovery(); r2.Lost != 0 || !subset(damagedRecords(r2.DeleteDamage), damagedRecords(r.DeleteDamage)) || r2.CheckpointError != nil {
		t.Errorf("round %d: second open found more: %+v (the first found delete damage %q)", round, r2, r.DeleteDamage)
	}
	mustCloseQueue(t, q)
	t.Logf("round %d: %d events (%d acknowledged before the failure, %d messages); "+
		"after: %d from the queue, %d dead letters, %d damaged, lost %d, %d delete and %d receive-count records damaged",
		round, len(events), acked, len(l.ids), len(rec.source), len(rec.dead), len(rec.damaged),
		r.Lost, len(r.DeleteDamage), len(r.ReceiveDamage))
}

// powerCopy is the power failure of the queue whose syncs sd watches: it
// writes into disk (and its dead letters beside it) what the failure may
// leave; see syncDisk.
func powerCopy(t *testing.T, rng *rand.Rand, sd *syncDisk, disk string, st *syncDiskStats) {
	t.Helper()
	sd.crash()
	sd.build(t, rng, disk, st)
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// damagedRecords names the records of a recovery's damage reports ("offset
// N in segment S"), without the details that depend on how much of the
// file a read could see.
func damagedRecords(reports []string) []string {
	var out []string
	for _, r := range reports {
		out = append(out, damagedRecord.FindString(r))
	}
	return out
}

var damagedRecord = regexp.MustCompile(`offset [0-9]+ in segment [0-9]+\.log`)
