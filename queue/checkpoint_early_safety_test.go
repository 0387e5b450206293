package queue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// The early checkpoints (checkpointEarly, noteHead, settleDrop) under
// pressure: the rate limit seen through a ManualClock, drop points held
// by the dedup window, messages that hold the head (in flight, delayed,
// grouped) moved out while checkpoints come early, Close racing a stream
// of deletes, kill -9 and power failures with early checkpoints doing most
// of the drops.

// headIno returns the inode of queue.head: a checkpoint that writes
// replaces the file, so a new inode is a new checkpoint.
func headIno(t *testing.T, dir string) uint64 {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, headName))
	if errors.Is(err, os.ErrNotExist) {
		return 0 // no checkpoint written yet
	}
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Inode(st)
}

// ckTimer returns the checkpoint timer now set: checkpointEarly replaces
// it whether it runs the checkpoint or puts it off.
func ckTimer(q *Queue) Timer {
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	return q.ck.timer
}

// ckRuns returns how many checkpoints the queue ran. A ManualClock runs
// the timers that come due inside Advance, and an early checkpoint sets
// its timer (ckTimer) or runs, under the checkpoint lock, before its
// goroutine ends: once either is seen, the count says what was decided,
// with no wait.
func ckRuns(q *Queue) int {
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	return q.ck.count
}

// ckFlags returns early and held, under Queue.mu.
func ckFlags(q *Queue) (early bool, held uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ck.early, q.ck.held
}

// receiveAll receives every ready message and returns copies of them.
func receiveAll(t *testing.T, q *Queue) []Message {
	t.Helper()
	var out []Message
	for {
		m, ok := tryRecv(t, q)
		if !ok {
			return out
		}
		m.Body = slices.Clone(m.Body)
		out = append(out, m)
	}
}

// deleteBelow deletes the messages of ms below offset to, in order, and
// returns the rest.
func deleteBelow(t *testing.T, q *Queue, ms []Message, to uint64) []Message {
	t.Helper()
	for len(ms) > 0 && ms[0].Offset < to {
		mustDelete(t, q, ms[0].Offset)
		ms = ms[1:]
	}
	return ms
}

// earlyInterval is the checkpoint interval of the ManualClock tests: an
// early checkpoint waits for an eighth of it, a second.
const earlyInterval = 8 * time.Second

// openEarlyQueue opens a queue with a ManualClock, checkpoints every
// earlyInterval and deadlines an hour away, then applies mod.
func openEarlyQueue(t *testing.T, dir string, clock *fakeClock, mod ...func(*Options)) *Queue {
	t.Helper()
	return openTestQueue(t, dir, clock, append([]func(*Options){func(o *Options) {
		o.CheckpointInterval = earlyInterval
		o.Visibility = time.Hour
	}}, mod...)...)
}

// With a ManualClock: a delete that moves the head past the drop point
// brings no checkpoint before an eighth of the interval has passed since
// the last one, not a nanosecond before (queue.head is not replaced and no
// segment goes), and brings it at that nanosecond without the tick; one
// brought forward after the eighth has passed runs at once. Five segments
// in a row, then one with the eighth passed beforehand.
func TestEarlyCheckpointWaitsAnEighthOfInterval(t *testing.T) {
	const interval = earlyInterval
	clock := newFakeClock()
	dir := t.TempDir()
	q := openEarlyQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	body := strings.Repeat("b", 300)
	for q.log.Stats().Segments < 10 {
		mustSend(t, q, body)
	}
	ms := receiveAll(t, q)
	if len(ms) == 0 {
		t.Fatal("nothing received")
	}
	for round := range 5 {
		p, ok := q.log.DropPoint()
		if !ok {
			t.Fatal("one segment left")
		}
		ino, first, timer, runs := headIno(t, dir), q.log.First(), ckTimer(q), ckRuns(q)
		ms = deleteBelow(t, q, ms, p)
		waitFor(t, "the early checkpoint decided", func() bool { return ckTimer(q) != timer })
		if ckRuns(q) != runs || headIno(t, dir) != ino || q.log.First() != first {
			t.Fatalf("round %d: a checkpoint ran (First %d, was %d) with no time passed since the last", round, q.log.First(), first)
		}
		clock.Advance(interval/8 - 1) // runs every timer due, here
		if ckRuns(q) != runs || headIno(t, dir) != ino || q.log.First() != first {
			t.Fatalf("round %d: a checkpoint ran a nanosecond before an eighth of the interval", round)
		}
		clock.Advance(1)
		waitFor(t, "the checkpoint at the eighth", func() bool { return q.log.First() == p && headIno(t, dir) != ino })
		if head, _ := q.ck.snapshot(); head != p {
			t.Fatalf("round %d: checkpointed head %d, want %d", round, head, p)
		}
	}
	// The eighth has passed already: the checkpoint comes with the delete.
	clock.Advance(interval / 8)
	p, _ := q.log.DropPoint()
	ms = deleteBelow(t, q, ms, p)
	waitFor(t, "the checkpoint without waiting", func() bool { return q.log.First() == p })
	for _, m := range ms {
		if string(m.Body) != body {
			t.Fatalf("message %d: body changed", m.Offset)
		}
	}
}

// A drop point the checkpointed head passed but the dedup window holds:
// the checkpoint that found it notes it (held) and no checkpoint comes
// early for it, however far the head goes, until the tick; the segments
// holding the dedup ids stay while the window does (a resend returns the
// first offset), and go once it has passed.
func TestEarlyCheckpointHeldByDedupWindow(t *testing.T) {
	const interval = earlyInterval
	clock := newFakeClock()
	dir := t.TempDir()
	q := openEarlyQueue(t, dir, clock, func(o *Options) { o.DedupWindow = time.Minute })
	defer mustCloseQueue(t, q)
	body := strings.Repeat("d", 300)
	ids := map[string]uint64{}
	for i := 0; q.log.Stats().Segments < 6; i++ {
		id := fmt.Sprint("dedup-", i)
		ids[id] = mustSendWith(t, q, body, SendOptions{DedupID: id})
	}
	ms := receiveAll(t, q)
	deleteBelow(t, q, ms, q.log.Next())
	clock.Advance(interval / 8)
	end := q.log.Next()
	waitFor(t, "the early checkpoint of the whole head", func() bool { h, _ := q.ck.snapshot(); return h == end })
	p, _ := q.log.DropPoint()
	if q.log.First() != 0 {
		t.Fatalf("First %d: segments with dedup ids in the window dropped", q.log.First())
	}
	waitFor(t, "the held drop point noted", func() bool { early, held := ckFlags(q); return !early && held == p })

	// The head moves on through new segments: nothing comes early (a
	// delete starts an early checkpoint, if any, before it returns:
	// ckFlags sees it at once).
	ino, timer, runs := headIno(t, dir), ckTimer(q), ckRuns(q)
	for q.log.Stats().Segments < 10 {
		mustSend(t, q, body)
	}
	deleteBelow(t, q, receiveAll(t, q), q.log.Next())
	if early, _ := ckFlags(q); early {
		t.Fatal("the deletes past a held drop point started an early checkpoint")
	}
	for range 6 { // to 7/8 of the interval after the checkpoint: no tick
		clock.Advance(interval / 8) // runs every timer due, here
	}
	if early, _ := ckFlags(q); early || ckRuns(q) != runs || headIno(t, dir) != ino || ckTimer(q) != timer {
		t.Fatalf("a checkpoint came early for a held drop point (early %v, %d checkpoints ran, queue.head replaced %v, timer replaced %v)",
			early, ckRuns(q)-runs, headIno(t, dir) != ino, ckTimer(q) != timer)
	}
	for id, off := range ids {
		if got := mustSendWith(t, q, body, SendOptions{DedupID: id}); got != off {
			t.Fatalf("dedup id %s in the window: resend got offset %d, want %d", id, got, off)
		}
	}
	// Past the window: the ticks drop the segments (a checkpoint that
	// writes nothing drops nothing: a message goes through at each).
	for q.log.First() < end {
		clock.Advance(interval)
		off := mustSend(t, q, body)
		deleteBelow(t, q, receiveAll(t, q), off+1)
		time.Sleep(time.Millisecond)
		if clock.Now().Sub(newFakeClock().Now()) > 10*time.Minute {
			t.Fatalf("the segments of the dedup ids never dropped (First %d, head %d)", q.log.First(), end)
		}
	}
	if got := mustSendWith(t, q, body, SendOptions{DedupID: "dedup-0"}); got == ids["dedup-0"] {
		t.Fatal("a dedup id past the window deduplicated")
	}
}

// Messages that hold the head while a stream goes past them: one in
// flight and never deleted, one delayed an hour, and a group whose first
// message is in flight with the second behind it; MaxHeldSegments 1 moves
// them out so that the early checkpoints (the clock moved an eighth at a
// time) drop the segments. The log stays short; after it all, and after a
// reopen, each held message is there under its offset with its body: the
// delayed one comes when due, the group's second after its first is
// deleted; nothing else comes back.
func TestEarlyCheckpointDropsPastMovedHeldMessages(t *testing.T) {
	const interval = earlyInterval
	clock := newFakeClock()
	dir := t.TempDir()
	opts := func(o *Options) {
		o.Visibility = 10 * time.Hour
		o.MaxHeldSegments = 1
	}
	q := openEarlyQueue(t, dir, clock, opts)
	body := strings.Repeat("s", 200)
	// Each in a segment of its own, with deleted messages around it: a
	// move takes at most an eighth of a segment's records.
	nextSegment := func() {
		t.Helper()
		for segs := q.log.Stats().Segments; q.log.Stats().Segments == segs; {
			mustSend(t, q, body)
		}
	}
	stuck := mustSend(t, q, "stuck")
	nextSegment()
	delayed := mustSendWith(t, q, "delayed", SendOptions{Delay: time.Hour})
	nextSegment()
	g1 := mustSendWith(t, q, "g1", SendOptions{Group: "g"})
	g2 := mustSendWith(t, q, "g2", SendOptions{Group: "g"})
	nextSegment()
	for _, m := range receiveAll(t, q) {
		switch m.Offset {
		case stuck, g1: // in flight, never deleted
		case delayed, g2:
			t.Fatalf("message %d handed out", m.Offset)
		default:
			mustDelete(t, q, m.Offset)
		}
	}
	maxSegs, appended := 0, q.log.Stats().AppendedBytes
	for i := range 3000 {
		mustSend(t, q, body)
		if i%4 == 3 {
			for _, m := range receiveAll(t, q) {
				if m.Offset == stuck || m.Offset == delayed || m.Offset == g1 || m.Offset == g2 {
					t.Fatalf("held message %d handed out again (%q)", m.Offset, m.Body)
				}
				mustDelete(t, q, m.Offset)
			}
		}
		if i%50 == 49 {
			clock.Advance(interval / 8)
			time.Sleep(time.Millisecond)
		}
		maxSegs = max(maxSegs, q.log.Stats().Segments)
	}
	deadline := time.Now().Add(time.Minute)
	for q.log.Stats().Segments > 4 {
		clock.Advance(interval / 8)
		time.Sleep(100 * time.Microsecond)
		if time.Now().After(deadline) {
			t.Fatalf("the held messages' segments never dropped: %d segments, %+v", q.log.Stats().Segments, q.Stats())
		}
	}
	if st := q.Stats(); st.Moved == 0 {
		t.Fatalf("nothing moved: %+v", st)
	}
	// The stream alone filled this many segments: the log held fewer at
	// any time, or nothing was dropped while it ran.
	made := int((q.log.Stats().AppendedBytes - appended) / uint64(q.log.SegmentBytes()))
	if maxSegs >= made {
		t.Fatalf("the log held %d segments while the stream filled %d: the held messages kept every segment", maxSegs, made)
	}
	t.Logf("at most %d segments while the stream filled %d; %d moves", maxSegs, made, q.Stats().Moved)
	mustCloseQueue(t, q)

	q = openEarlyQueue(t, dir, clock, opts)
	defer mustCloseQueue(t, q)
	clock.Advance(10*time.Hour + time.Second) // the in-flight ones come back, the delayed one is due
	got := map[uint64]string{}
	for _, m := range receiveAll(t, q) {
		got[m.Offset] = string(m.Body)
		if m.Offset == g1 {
			mustDelete(t, q, g1)
			for _, m := range receiveAll(t, q) {
				got[m.Offset] = string(m.Body)
			}
		}
	}
	want := map[uint64]string{stuck: "stuck", delayed: "delayed", g1: "g1", g2: "g2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the reopen: %v, want %v", got, want)
	}
}

// Close while receivers delete a stream and early checkpoints run (an
// eighth of a 4 ms interval: every half millisecond), over and over: Close
// returns nil; once it has returned nothing writes queue.head or removes a
// file; no goroutine outlives the queue; the reopen hands out every
// message sent and not deleted, none whose Delete returned, and no other.
func TestEarlyCheckpointCloseRacingDeletes(t *testing.T) {
	before := runtime.NumGoroutine()
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 25 {
		dir := t.TempDir()
		o := Options{
			Log:                engine.Options{SegmentBytes: 4096},
			Visibility:         time.Hour,
			CheckpointInterval: 4 * time.Millisecond,
			DedupWindow:        time.Duration(rng.IntN(2)) * time.Millisecond, // 0: the default, 5 min
		}
		q, err := Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		body := strings.Repeat("c", 150)
		var (
			mu      sync.Mutex
			sent    = map[uint64]bool{}
			deleted = map[uint64]bool{}
			bad     []string
			wg      sync.WaitGroup
			stop    atomic.Bool
		)
		for range 1500 {
			off, err := q.Send([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			sent[off] = true
		}
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					m, ok, err := q.TryReceive()
					if errors.Is(err, engine.ErrClosed) {
						return
					}
					if !ok {
						if err != nil {
							mu.Lock()
							bad = append(bad, fmt.Sprint("TryReceive: ", err))
							mu.Unlock()
						}
						return
					}
					if w == 2 && i%3 == 0 {
						continue // left in flight
					}
					err = q.Delete(m.Offset)
					if errors.Is(err, engine.ErrClosed) {
						return
					}
					mu.Lock()
					if err != nil {
						bad = append(bad, fmt.Sprintf("Delete(%d): %v", m.Offset, err))
					} else {
						deleted[m.Offset] = true
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(rng.IntN(15_000)) * time.Microsecond)
		if err := q.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		after := dirState(t, dir)
		stop.Store(true)
		wg.Wait()
		time.Sleep(10 * time.Millisecond)
		if d := testkit.DiffHashes(after, dirState(t, dir)); d != "" {
			t.Fatalf("round %d: the directory changed after Close returned: %s", round, d)
		}
		if len(bad) > 0 {
			t.Fatalf("round %d: %v", round, bad)
		}
		o.Visibility = time.Minute
		q, err = Open(dir, o)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		got := map[uint64]bool{}
		for {
			m, ok, err := q.TryReceive()
			if err != nil {
				t.Fatalf("round %d: TryReceive after the reopen: %v", round, err)
			}
			if !ok {
				break
			}
			if deleted[m.Offset] || !sent[m.Offset] || got[m.Offset] {
				t.Fatalf("round %d: message %d handed out after the reopen (deleted %v, sent %v, twice %v)",
					round, m.Offset, deleted[m.Offset], sent[m.Offset], got[m.Offset])
			}
			got[m.Offset] = true
		}
		for off := range sent {
			if !deleted[off] && !got[off] {
				t.Fatalf("round %d: message %d, never deleted, lost (%d sent, %d deleted, %d back)", round, off, len(sent), len(deleted), len(got))
			}
		}
		mustCloseQueue(t, q)
	}
	for deadline := time.Now().Add(time.Minute); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	}
}

// dirState describes the files of a queue's directory tree: names, sizes,
// inodes, modification times and contents.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	return testkit.MustHashDir(t, dir, testkit.HashOptions{Tree: true, FilesOnly: true, ModTimes: true, Inodes: true})
}

// With a ManualClock, Close racing deletes that bring checkpoints forward:
// after Close no timer of the queue is left on the clock, and advancing
// it runs nothing (queue.head is not replaced).
func TestEarlyCheckpointCloseLeavesNoTimer(t *testing.T) {
	for round := range 20 {
		clock := newFakeClock()
		dir := t.TempDir()
		q := openEarlyQueue(t, dir, clock)
		for q.log.Stats().Segments < 8 {
			mustSend(t, q, strings.Repeat("m", 300))
		}
		ms := receiveAll(t, q)
		clock.Advance(time.Second * time.Duration(round%2)) // an eighth passed, or not
		var wg sync.WaitGroup
		var deleted atomic.Int64
		var finished atomic.Bool
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Store(true)
			for _, m := range ms {
				if err := q.Delete(m.Offset); err != nil {
					if !errors.Is(err, engine.ErrClosed) {
						t.Errorf("Delete(%d): %v", m.Offset, err)
					}
					return
				}
				deleted.Add(1)
			}
		}()
		// Close after a number of deletes that grows with the round:
		// from before the first early checkpoint to after several.
		for deleted.Load() < int64(round*len(ms)/20) && !finished.Load() {
			runtime.Gosched()
		}
		if err := q.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		wg.Wait()
		// Close waited for the checkpoints brought forward: nothing of
		// the queue runs now, nor is left on the clock to run.
		ino := headIno(t, dir)
		if n := clock.Pending(); n != 0 {
			t.Fatalf("round %d: %d timers left on the clock after Close", round, n)
		}
		clock.Advance(time.Hour)
		if headIno(t, dir) != ino {
			t.Fatalf("round %d: queue.head written after Close", round)
		}
	}
}

// earlyKillOptions: a checkpoint interval long enough that the early
// checkpoints (an eighth of it) drop most segments within a run, small
// segments so the head leaves one every few dozen deletes, a dedup window
// of a second (which holds drop points back for a while, and is longer
// than the workload's resend of an id takes under the race detector), and
// the workload's groups, delays and dead letters.
func earlyKillOptions() Options {
	o := wlOptions(engine.SyncNone)
	o.Log.SegmentBytes = 4096
	o.CheckpointInterval = 400 * time.Millisecond
	o.DedupWindow = time.Second
	return o
}

// TestEarlyCheckpointKill9KeepsAcknowledged: a queue process runs the
// workload with early checkpoints doing the drops and is killed with
// SIGKILL at a random moment. The reopened queue and its dead letters hold
// every acknowledged message no Delete was called for; no message whose
// Delete returned comes back; groups keep their order; nothing is damaged;
// new messages take new offsets.
func TestEarlyCheckpointKill9KeepsAcknowledged(t *testing.T) {
	if dir := os.Getenv("PAGELOG_EARLY_KILL_DIR"); dir != "" {
		earlyKillChild(dir)
		return
	}
	for round := range 3 {
		dir := t.TempDir()
		cmd, pipe, stderr := startChild(t, "TestEarlyCheckpointKill9KeepsAcknowledged", "PAGELOG_EARLY_KILL_DIR="+dir)
		got, busy, copied := childEvents(pipe, 3000)
		select {
		case <-busy:
		case <-time.After(30 * time.Second):
		}
		time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond)
		killChild(t, cmd, copied, stderr)
		events := *got
		l := newLedger(events, len(events))
		if len(l.ids) < 500 {
			t.Fatalf("round %d: the child did too little (%d events)\nstderr: %s", round, len(events), stderr.String())
		}
		o := earlyKillOptions()
		o.Visibility = time.Minute
		q, err := Open(dir, o)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		r := q.Recovery()
		rec := drainAll(t, q, l)
		checkRecovered(t, l, rec)
		if len(rec.damaged) > 0 {
			t.Errorf("round %d: damaged hand-outs after kill -9: %v", round, rec.damaged)
		}
		if off := mustSend(t, q, "after"); off <= l.maxSent {
			t.Errorf("round %d: a new message took offset %d, acknowledged before the kill", round, off)
		}
		t.Logf("round %d: %d events, %d acknowledged; after reopen %d from the source, %d dead letters; recovery head %d (max sent %d)",
			round, len(events), len(l.ids), len(rec.source), len(rec.dead), r.Head, l.maxSent)
		mustCloseQueue(t, q)
	}
}

func earlyKillChild(dir string) {
	q, err := Open(dir, earlyKillOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var mu sync.Mutex
	emit := func(e wlEvent) {
		line := fmt.Sprintf("%c %d %d\n", e.kind, e.off, e.id)
		mu.Lock()
		os.Stdout.WriteString(line)
		mu.Unlock()
	}
	workload(q, make(chan struct{}), emit, func(s string) {
		fmt.Fprintln(os.Stderr, s)
		os.Exit(4)
	})
	select {}
}

// TestEarlyCheckpointPowerLossKeepsAcknowledged: the steady load with early
// checkpoints doing the drops (interval 800 ms: an early one at most every
// 100 ms, while the head leaves a 4 KiB segment every few milliseconds),
// under each sync policy, every log synced, then a power failure
// (powerCopy) and a restart as it is: every send acknowledged before the
// sync comes back unless a Delete was called for it, and no message whose
// Delete returned before then.
func TestEarlyCheckpointPowerLossKeepsAcknowledged(t *testing.T) {
	for round, policy := range []engine.SyncPolicy{engine.SyncInterval, engine.SyncNone, engine.SyncAlways} {
		rng := rand.New(rand.NewPCG(uint64(round), uint64(time.Now().UnixNano())))
		o := wlOptions(policy)
		o.Log.SegmentBytes = 4096
		o.Log.SyncInterval = 5 * time.Millisecond
		o.CheckpointInterval = 800 * time.Millisecond
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
		// The power fails once an early checkpoint has dropped a segment,
		// a random number of events later.
		waitFor(t, "a segment dropped", func() bool { return q.log.First() > 0 })
		mu.Lock()
		target := len(events) + rng.IntN(400)
		mu.Unlock()
		waitFor(t, "the events before the power failure", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(events) >= target
		})
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
		first := q.log.First()
		disk := t.TempDir()
		var st syncDiskStats
		powerCopy(t, rng, sd, disk, &st)
		mu.Lock()
		copied := len(events)
		mu.Unlock()
		close(stop)
		wait()
		if err := q.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		all := append([]wlEvent(nil), events...)
		for _, c := range []struct {
			what, dir string
			l         *wlLedger
		}{{"power failure", disk, newLedger(all[:copied], synced)}, {"restart", dir, newLedger(all, len(all))}} {
			o := o
			o.Log.Sync = engine.SyncNone
			o.Visibility = time.Minute
			q, err := Open(c.dir, o)
			if err != nil {
				t.Fatalf("round %d (%s): open after the %s: %v", round, policy, c.what, err)
			}
			rec := drainAll(t, q, c.l)
			checkRecovered(t, c.l, rec)
			for _, d := range rec.damaged {
				if _, was := c.l.sentAt[d.off]; was && !d.dead {
					t.Errorf("round %d (%s): after the %s, acknowledged message %d is damaged: %s", round, policy, c.what, d.off, d.why)
				}
			}
			if off := mustSend(t, q, "after"); off <= c.l.maxSent {
				t.Errorf("round %d (%s): after the %s, a new message took offset %d, acknowledged before", round, policy, c.what, off)
			}
			mustCloseQueue(t, q)
			t.Logf("round %d (%s): after the %s, %d from the queue, %d dead letters; First before it %d",
				round, policy, c.what, len(rec.source), len(rec.dead), first)
		}
	}
}
