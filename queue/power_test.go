package queue

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/record"
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
	if !t.Failed() && st.sectorsOld == 0 {
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

type powerStats struct{ torn, dropped, unsynced int }

// powerCopy is the power failure of the queue whose syncs sd watches: it
// writes into disk (and its dead letters beside it) what the failure may
// leave; see syncDisk.
func powerCopy(t *testing.T, rng *rand.Rand, sd *syncDisk, disk string, st *syncDiskStats) {
	t.Helper()
	sd.crash()
	sd.build(t, rng, disk, st)
}

// powerCopyLog copies the log l (durable up to l.Durable()) from the
// directory from into to as a power failure could leave it: the records
// below the durable point as they are, each 512-byte sector after them
// kept, zeroed or torn, and, unless the log syncs its directory at each
// roll (dirSync), its newest segments past the durable point sometimes
// lost. damaged: the log may hold damaged records below its durable point
// (an earlier power failure's, recovered past), which the walk to the
// durable point steps over instead of failing.
func powerCopyLog(t *testing.T, rng *rand.Rand, l interface{ Durable() uint64 }, from, to string, dirSync, damaged bool, st *powerStats) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"log.meta", "log.recovery"} {
		if b, err := os.ReadFile(filepath.Join(from, name)); err == nil {
			if err := os.WriteFile(filepath.Join(to, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	durable := l.Durable()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	var bases []uint64
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(name, ".log") || strings.HasSuffix(name, ".index") || strings.HasSuffix(name, ".timeindex")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, name))
		if err != nil {
			continue // dropped below a durable head meanwhile
		}
		if err := os.WriteFile(filepath.Join(to, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if base, err := strconv.ParseUint(strings.TrimSuffix(name, ".log"), 10, 64); err == nil && strings.HasSuffix(name, ".log") {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	for k := len(bases) - 1; k > 0 && !dirSync && bases[k] >= durable && rng.IntN(3) == 0; k-- {
		for _, suffix := range []string{".log", ".index", ".timeindex"} {
			os.Remove(filepath.Join(to, segmentName(bases[k])+suffix))
		}
		bases = bases[:k]
		st.dropped++
	}
	for _, base := range bases {
		torn, unsynced := tearAfter(t, rng, filepath.Join(to, segmentName(base)+".log"), base, durable, damaged)
		st.torn += torn
		st.unsynced += unsynced
	}
}

// segmentName is a segment's file name without its suffix.
func segmentName(base uint64) string { return fmt.Sprintf("%020d", base) }

// tearAfter keeps the records of the segment file at path (first offset
// base) below durable, and keeps, zeroes or fills with garbage each
// 512-byte sector after them. It returns how many sectors it changed and
// how many bytes of records after the durable point it found. damaged:
// see powerCopyLog.
func tearAfter(t *testing.T, rng *rand.Rand, path string, base, durable uint64, damaged bool) (torn, unsynced int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pos, off := 0, base
	for off < durable && pos+16 <= len(b) {
		n := int(binary.BigEndian.Uint32(b[pos:]) & (1<<31 - 1))
		if n == 0 && slices.IndexFunc(b[pos:], func(c byte) bool { return c != 0 }) < 0 {
			break // a sealed segment's zero tail (a reused file keeps its size)
		}
		if n < 12 || pos+4+n > len(b) || binary.BigEndian.Uint64(b[pos+8:]) != off {
			if damaged {
				p, id, ok := nextWholeRecord(b, pos+1, off, durable)
				if !ok {
					return 0, 0 // the records after it are in the next segments: the file is durable
				}
				pos, off = p, id
				continue
			}
			t.Fatalf("%s: record %d at %d, below the durable point %d, is not whole", path, off, pos, durable)
		}
		pos += 4 + n
		off++
	}
	if off < durable {
		return 0, 0 // every record of the file is durable
	}
	for p := pos; p+16 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[p:]) & (1<<31 - 1))
		if n < 12 || p+4+n > len(b) {
			break
		}
		p += 4 + n
		unsynced += 4 + n
	}
	for s := pos / 512 * 512; s < len(b); s += 512 {
		from, to := max(s, pos), min(s+512, len(b))
		switch rng.IntN(3) {
		case 0: // as written
			continue
		case 1:
			if slices.ContainsFunc(b[from:to], func(c byte) bool { return c != 0 }) {
				torn++
			}
			clear(b[from:to])
			continue
		case 2:
			if !slices.ContainsFunc(b[from:to], func(c byte) bool { return c != 0 }) {
				continue // never written: garbage there is no power failure's
			}
			for i := from; i < to; i++ {
				b[i] = byte(rng.Uint32())
			}
		}
		if slices.ContainsFunc(b[from:to], func(c byte) bool { return c != 0 }) {
			torn++
		}
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return torn, unsynced
}

// nextWholeRecord finds the first record of b at or after from that
// verifies and whose id lies in (after, durable): where a walk goes on
// past a damaged record.
func nextWholeRecord(b []byte, from int, after, durable uint64) (pos int, id uint64, ok bool) {
	for p := from; p+16 <= len(b); p++ {
		v, err := record.Decode(b[p:], 0)
		if err == nil && v.ID > after && v.ID < durable {
			return p, v.ID, true
		}
	}
	return 0, 0, false
}

// damagedRecords names the records of a recovery's damage reports ("offset
// N in segment S"), without the details that depend on how much of the
// file a read could see.
// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func damagedRecords(reports []string) []string {
	var out []string
	for _, r := range reports {
		out = append(out, damagedRecord.FindString(r))
	}
	return out
}

var damagedRecord = regexp.MustCompile(`offset [0-9]+ in segment [0-9]+\.log`)
