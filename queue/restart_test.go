package queue

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// fillAndConsume sends n messages, receives them all and deletes those for
// which del says so; it returns the offsets left undeleted.
func fillAndConsume(t testing.TB, q *Queue, n int, del func(uint64) bool) []uint64 {
	t.Helper()
	for i := range n {
		mustSend(t, q, fmt.Sprint("body ", i))
	}
	var left []uint64
	for _, m := range drain(t, q) {
		if del(m.Offset) {
			mustDelete(t, q, m.Offset)
		} else {
			left = append(left, m.Offset)
		}
	}
	return left
}

// wantRedelivery checks that q hands out exactly want, in this order, each
// with Receives 1 and its original body, and then nothing.
func wantRedelivery(t testing.TB, q *Queue, want []uint64) {
	t.Helper()
	got := drain(t, q)
	if !slices.Equal(offsetsOf(got), want) {
		t.Fatalf("after the restart handed out %v, want %v", offsetsOf(got), want)
	}
	for _, m := range got {
		if m.Receives != 1 || string(m.Body) != fmt.Sprint("body ", m.Offset) {
			t.Fatalf("after the restart: %+v (body %q)", m, m.Body)
		}
	}
}

// After a clean Close and reopen no deleted message is handed out again and
// every other one is ready at once, lowest offset first, Receives 1.
func TestQueueRestartClean(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	left := fillAndConsume(t, q, 300, func(off uint64) bool { return off%3 != 1 || off < 30 })
	for i := 300; i < 310; i++ { // sent, never received
		mustSend(t, q, fmt.Sprint("body ", i))
		left = append(left, uint64(i))
	}
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	rec := q.Recovery()
	if rec.HeadFrom != "checkpoint" || rec.Head != left[0] || rec.CheckpointError != nil {
		t.Fatalf("recovery: %+v", rec)
	}
	if st := q.Stats(); st.Head != left[0] || st.End != 310 || st.InFlight != 0 || st.ReadyAgain != 0 {
		t.Fatalf("stats after reopen: %+v", st)
	}
	wantRedelivery(t, q, left)
}

// The head checkpoint table: each way queue.head can be damaged is reported
// and never trusted; the queue starts from the log's first offset and uses
// what the delete log still holds, so it may redeliver but never loses.
func TestQueueRestartDamagedHead(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"bit flip in head", func(b []byte) []byte { b[5] ^= 1; return b }},
		{"bit flip in checksum", func(b []byte) []byte { b[12] ^= 0x80; return b }},
		{"unknown version", func(b []byte) []byte { b[0] = 9; return b }},
		{"truncated", func(b []byte) []byte { return b[:7] }},
		{"empty", func(b []byte) []byte { return nil }},
		{"too long", func(b []byte) []byte { return append(b, 0) }},
	}
	// A byte added to a version 4 file damages its index of moved copies
	// only: the head's own checksum holds, and open reads the log for the
	// copies (TestOpenFindsMovedCopiesThroughHeadIndex).
	indexOnly := map[string]bool{"too long": true}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			q := openTestQueue(t, dir, clock)
			left := fillAndConsume(t, q, 100, func(off uint64) bool { return off%4 != 0 })
			mustCloseQueue(t, q)
			path := filepath.Join(dir, headName)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, c.corrupt(b), 0o600); err != nil {
				t.Fatal(err)
			}
			q = openTestQueue(t, dir, clock)
			defer mustCloseQueue(t, q)
			rec := q.Recovery()
			switch {
			case indexOnly[c.name]:
				if rec.HeadFrom != "checkpoint" || !strings.HasPrefix(rec.MovedFrom, "log (index damaged") {
					t.Fatalf("recovery: %+v", rec)
				}
			case rec.HeadFrom != "log start (checkpoint damaged)" || !errors.Is(rec.CheckpointError, engine.ErrBadFile):
				t.Fatalf("recovery: %+v", rec)
			}
			// The delete log was not trimmed (no segment lies below the
			// head yet), so exactly the undeleted messages come back.
			wantRedelivery(t, q, left)
		})
	}
}

// Without queue.head the head is the log's start and the delete log alone
// keeps deleted messages from coming back.
func TestQueueRestartNoCheckpoint(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	left := fillAndConsume(t, q, 50, func(off uint64) bool { return off%5 != 2 })
	mustCloseQueue(t, q)
	if err := os.Remove(filepath.Join(dir, headName)); err != nil {
		t.Fatal(err)
	}
	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	rec := q.Recovery()
	if rec.HeadFrom != "log start (no checkpoint)" || rec.DeleteRecords != 40 || rec.DeletesApplied != 40 || rec.Head != 2 {
		t.Fatalf("recovery: %+v", rec)
	}
	wantRedelivery(t, q, left)
}

// Delete records below a checkpointed head are removed a segment at a
// time, and what is left still keeps deleted messages from coming back.
func TestQueueDeleteLogSegmentsDropped(t *testing.T) {
	old := deleteSegmentBytes
	deleteSegmentBytes = 24 * 100 // 100 delete records per segment
	t.Cleanup(func() { deleteSegmentBytes = old })
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	// 5000 messages; 3000..3009 stay undeleted and hold the head.
	left := fillAndConsume(t, q, 5000, func(off uint64) bool { return off < 3000 || off >= 3010 })
	clock.Advance(time.Second) // a checkpoint
	st := q.Stats()
	if st.Checkpointed != 3000 || st.CheckpointError != nil {
		t.Fatalf("stats after the checkpoint: %+v", st)
	}
	first := q.dels.First()
	// Buckets of 1024 records: the first two buckets (records 0..2047)
	// name messages below 3000 only.
	if first < 2000 || first > 2048 {
		t.Fatalf("the delete log starts at %d, want the segments below record 2048 removed", first)
	}
	if q.log.First() == 0 {
		t.Fatal("no message segment below the head was removed")
	}
	mustCloseQueue(t, q)

	// The checkpoint alone would do; remove it to show the delete log kept
	// what the head does not cover.
	q = openTestQueue(t, dir, clock)
	wantRedelivery(t, q, left)
	mustCloseQueue(t, q)
	os.Remove(filepath.Join(dir, headName))
	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	got := offsetsOf(drain(t, q))
	if !slices.Contains(got, 3000) || slices.Contains(got, 3010) || len(got) >= 5000 {
		t.Fatalf("without queue.head got %d messages from %v", len(got), got[:min(len(got), 10)])
	}
}

// A power failure under SyncNone can lose the tail of the message log while
// queue.head and the delete log name offsets in it. The log skips past the
// highest offset known given out (a delete record names 7); the lost
// messages not deleted (5 and 6) are deleted with a range record, so that
// new messages never take an offset known as used.
func TestQueueRestartLostTail(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	fillAndConsume(t, q, 10, func(off uint64) bool { return off < 5 || off == 7 })
	mustCloseQueue(t, q)
	os.Remove(filepath.Join(dir, headName))
	loseTail(t, dir, 3) // messages 3..9 lost

	q = openTestQueue(t, dir, clock)
	rec := q.Recovery()
	if rec.Lost != 2 || rec.Head != 8 {
		t.Fatalf("recovery: %+v", rec)
	}
	if off := mustSend(t, q, "body 8"); off != 8 {
		t.Fatalf("new message at %d, want 8", off)
	}
	wantRedelivery(t, q, []uint64{8})
	mustCloseQueue(t, q)

	os.Remove(filepath.Join(dir, headName)) // the placeholders' delete records suffice
	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	if rec := q.Recovery(); rec.Head != 8 || rec.Lost != 0 {
		t.Fatalf("second recovery: %+v", rec)
	}
	wantRedelivery(t, q, []uint64{8})
}

// loseTail rewrites the message log of the queue in dir with its first n
// messages only.
func loseTail(t *testing.T, dir string, n int) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != headName && e.Name() != "LOCK" {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := l.Append([]byte(fmt.Sprint("body ", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// kill -9 under SyncNone: the page cache survives, so the promise of a
// clean restart holds. A child process sends, receives and deletes, with
// head checkpoints on the way, prints every delete that returned, and
// kills itself.
func TestQueueRestartKill9(t *testing.T) {
	if dir := os.Getenv("PAGELOG_QUEUE_KILL_DIR"); dir != "" {
		queueKillChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := testkit.Child("TestQueueRestartKill9")
	cmd.Env = append(os.Environ(), "PAGELOG_QUEUE_KILL_DIR="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if !testkit.KilledBySIGKILL(err) {
		t.Fatalf("child: %v, want it killed\nstdout: %s\nstderr: %s", err, out, stderr.Bytes())
	}
	sent, deleted := parseKillOutput(t, out)
	var left []uint64
	for off := range uint64(sent) {
		if !deleted[off] {
			left = append(left, off)
		}
	}
	q := openTestQueue(t, dir, newFakeClock())
	defer mustCloseQueue(t, q)
	rec := q.Recovery()
	if rec.HeadFrom != "checkpoint" || rec.Log.Clean || rec.Lost != 0 {
		t.Fatalf("recovery: %+v", rec)
	}
	if rec.Head == 0 || rec.DeletesApplied == 0 {
		t.Fatalf("want both a checkpointed head and delete records above it: %+v", rec)
	}
	t.Logf("child sent %d, deleted %d; reopened at head %d with %d delete records above it",
		sent, len(deleted), rec.Head, rec.DeletesApplied)
	wantRedelivery(t, q, left)
}

func parseKillOutput(t *testing.T, out []byte) (int, map[uint64]bool) {
	t.Helper()
	sent, deleted := -1, map[uint64]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("child line %q", sc.Text())
		}
		switch f[0] {
		case "sent":
			sent = int(n)
		case "deleted":
			deleted[n] = true
		}
	}
	if sent < 0 {
		t.Fatalf("child did not report its sends:\n%s", out)
	}
	return sent, deleted
}

// queueKillChild is the child of TestQueueRestartKill9.
func queueKillChild(dir string) {
	q, err := Open(dir, Options{
		Log:                engine.Options{SegmentBytes: 8192, Sync: engine.SyncNone},
		Visibility:         time.Hour,
		CheckpointInterval: time.Millisecond,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	const n = 3000
	for i := range n {
		if _, err := q.Send([]byte(fmt.Sprint("body ", i))); err != nil {
			os.Exit(4)
		}
	}
	fmt.Printf("sent %d\n", n)
	for batch := range 3 {
		for i := range 800 {
			m, err := q.Receive(context.Background())
			if err != nil {
				os.Exit(5)
			}
			if (i+batch)%7 == 3 { // left in flight
				continue
			}
			if q.Delete(m.Offset) != nil {
				os.Exit(6)
			}
			fmt.Printf("deleted %d\n", m.Offset)
		}
		if batch < 2 { // let a checkpoint cover this batch's head
			head := q.Stats().Head
			for q.Stats().Checkpointed < head {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	os.Stdout.Sync()
	testkit.KillSelf()
	select {}
}

// TestQueueSideLogsBounded: with receive counts and dedup ids in use, the
// receive-count log, the delete log, the message log and the dedup window
// stay bounded while the queue runs: their segments below the head (and,
// for the messages, below the dedup window) are removed as the head moves.
func TestQueueSideLogsBounded(t *testing.T) {
	old := deleteSegmentBytes
	deleteSegmentBytes = 28 * 100 // 100 receive-count records per segment
	t.Cleanup(func() { deleteSegmentBytes = old })
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock, func(o *Options) {
		o.MaxReceives = 3
		o.DedupWindow = 10 * time.Second
	})
	defer mustCloseQueue(t, q)
	segments := func(sub string) int {
		names, _ := filepath.Glob(filepath.Join(dir, sub, "*.log"))
		return len(names)
	}
	var peak [3]int // receives, deletes, messages: the most seen in rounds 5-9
	for round := range 20 {
		for i := range 300 {
			mustSendWith(t, q, "body", SendOptions{DedupID: fmt.Sprint(round, "-", i)})
			m, ok := tryRecv(t, q)
			if !ok {
				t.Fatal("nothing to receive")
			}
			mustDelete(t, q, m.Offset)
		}
		clock.Advance(2 * time.Second) // a checkpoint; the dedup window moves on
		now := [3]int{segments(receivesDir), segments(deletesDir), segments(".")}
		switch {
		case round >= 5 && round < 10:
			for k := range now {
				peak[k] = max(peak[k], now[k])
			}
		case round >= 10:
			for k, what := range []string{"receive-count", "delete", "message"} {
				if now[k] > peak[k]+2 {
					t.Fatalf("round %d: the %s log grew to %d segments (at most %d in rounds 5-9)", round, what, now[k], peak[k])
				}
			}
		}
		if st := q.Stats(); st.DedupIDs > 6*300 {
			t.Fatalf("round %d: %d dedup ids remembered, the window holds about 5 rounds of 300", round, st.DedupIDs)
		}
	}
	if q.recvs.First() == 0 || q.log.First() == 0 {
		t.Fatalf("nothing removed: receive-count log from %d, message log from %d", q.recvs.First(), q.log.First())
	}
	t.Logf("segments at the end: %d receive-count, %d delete, %d message (peaks in rounds 5-9: %v)",
		segments(receivesDir), segments(deletesDir), segments("."), peak)
}

// A receive-count record that names an offset at or past the message
// log's end (its record lost: a moved copy whose sync a power failure cut
// short) gives its count to no new message sent there after a restart.
func TestReceiveCountPastEndNotInherited(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	maxRecv := func(o *Options) { o.MaxReceives = 5 }
	q := openTestQueue(t, dir, clock, maxRecv)
	next := q.log.Next()
	q.mu.Lock()
	_, err := q.appendReceive(next, 4)
	q.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock, maxRecv)
	defer mustCloseQueue(t, q)
	off := mustSend(t, q, "new")
	m, ok := tryRecv(t, q)
	if off != next || !ok || m.Offset != off || m.Receives != 1 {
		t.Fatalf("a new message at %d (sent at %d): %v %+v, want its first receive", next, off, ok, m)
	}
}
