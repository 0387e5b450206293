package queue

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// One message stays in flight while thousands pass: it is moved (more than
// once) and keeps its offset; every other message is handed out once with
// its own offset and body.
func TestQueueMovedStuckInFlight(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) { o.Visibility = time.Hour })
	defer mustCloseQueue(t, q)
	stuck := mustSend(t, q, "stuck")
	if m, ok := tryRecv(t, q); !ok || m.Offset != stuck {
		t.Fatal("the first message was not handed out")
	}
	for i := range 3000 {
		body := fmt.Sprint("m", i)
		off := mustSend(t, q, body)
		m, ok := tryRecv(t, q)
		if !ok {
			t.Fatalf("message %d (offset %d): nothing to receive; %+v", i, off, q.Stats())
		}
		if m.Offset != off || string(m.Body) != body {
			t.Fatalf("got %d %q, want %d %q", m.Offset, m.Body, off, body)
		}
		mustDelete(t, q, m.Offset)
		if i%100 == 0 {
			clock.Advance(time.Second) // a checkpoint
		}
	}
	st := q.Stats()
	if st.Moved < 2 || st.Messages != 1 || st.InFlight != 1 || st.Head <= stuck {
		t.Fatalf("after 3000 messages past a stuck one: %+v", st)
	}
	if first := q.log.First(); first <= stuck {
		t.Fatalf("the stuck message's segment is still there (log from %d)", first)
	}
	// Messages (beside the owner) shows it by its offset, with its
	// copy's; Discard of the copy's offset names no message.
	var stored []Stored
	if err := Messages(q.Dir(), func(s Stored) bool { s.Body = nil; stored = append(stored, s); return true }); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 || stored[0].Offset != stuck || stored[0].Record <= stuck || stored[0].Receives != 1 {
		t.Fatalf("Messages: %+v, want the stuck message %d with a later record", stored, stuck)
	}
	if err := q.Discard(stored[0].Record); err != nil || q.Stats().Messages != 1 {
		t.Fatalf("Discard of the copy's offset: %v, %+v", err, q.Stats())
	}
	clock.Advance(time.Hour) // its deadline passes
	m, ok := tryRecv(t, q)
	if !ok || m.Offset != stuck || string(m.Body) != "stuck" || m.Receives != 2 {
		t.Fatalf("redelivery of the stuck message: %v %+v, want offset %d body %q receives 2", ok, m, stuck, "stuck")
	}
	mustDelete(t, q, stuck)
	if _, ok := tryRecv(t, q); ok {
		t.Fatal("a message after the last delete")
	}
	if st := q.Stats(); st.Messages != 0 || st.Head != st.End {
		t.Fatalf("after deleting the moved message: %+v", st)
	}
}

// Messages received and left to expire again and again, with deletes in
// between: moves happen, and every message is handed out until deleted.
func TestQueueMovedRedeliveries(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	sent := map[uint64]string{}
	for i := range 3000 {
		body := fmt.Sprint(i)
		sent[mustSend(t, q, body)] = body
	}
	for k := 0; len(sent) > 0 && k < 100000; k++ {
		m, ok := tryRecv(t, q)
		if !ok {
			clock.Advance(testVisibility / 4)
			continue
		}
		if want, ok := sent[m.Offset]; !ok || string(m.Body) != want {
			t.Fatalf("offset %d handed out with body %q, sent %q (%v)", m.Offset, m.Body, want, ok)
		}
		if k%3 == 0 {
			continue // its deadline passes
		}
		mustDelete(t, q, m.Offset)
		delete(sent, m.Offset)
	}
	st := q.Stats()
	if len(sent) > 0 || st.Moved == 0 || st.Messages != 0 {
		t.Fatalf("%d messages never deleted; %+v", len(sent), st)
	}
}

// dirUsage returns the message-log segments in dir, the bytes of every
// file below it (side logs and checkpoints too) but the engine's spare
// files, and the bytes of those: the next segment prepared ahead and the
// files of dropped segments kept for reuse (engine.Options.RecycleSegments).
func dirUsage(t *testing.T, dir string) (segments int, bytes, spare int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed (or renamed for reuse) while the walk ran
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if name := d.Name(); strings.HasPrefix(name, "prepared.") || strings.HasPrefix(name, "recycled-") {
			spare += info.Size()
			return nil
		}
		bytes += info.Size()
		if name := d.Name(); filepath.Dir(path) == dir && len(name) == 24 && strings.HasSuffix(name, ".log") {
			segments++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return segments, bytes, spare
}

// listDir logs every file below dir with its size.
func listDir(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				t.Logf("%8d %s", info.Size(), path[len(dir):])
			}
		}
		return nil
	})
}

var heldMiB = flag.Int("queue.heldmib", 8, "MiB of messages TestQueueMovedDiskBounded passes by its stuck message (the issue's target: 50)")

// A queue runs with one message that never finishes (stuck in flight, or
// failing again and again) while many segments' worth of messages pass:
// the message log's segments, and the bytes of everything in the
// directory, side logs included, stay bounded while it runs.
func TestQueueMovedDiskBounded(t *testing.T) {
	old := deleteSegmentBytes
	deleteSegmentBytes = 4 << 10
	t.Cleanup(func() { deleteSegmentBytes = old })
	const segBytes = 64 << 10
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing=%v", failing), func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			q := openTestQueue(t, dir, clock, func(o *Options) {
				o.Log.SegmentBytes = segBytes
				o.MaxReceives = 1 << 30 // the receive-count log is written
				o.Visibility = time.Hour
				if failing {
					o.Visibility = time.Second
				}
			})
			defer mustCloseQueue(t, q)
			stuck := mustSend(t, q, "stuck")
			if m, ok := tryRecv(t, q); !ok || m.Offset != stuck {
				t.Fatal("the first message was not handed out")
			}
			body := strings.Repeat("x", 1000)
			maxSegs, maxBytes, maxSpare, maxAll, receives := 0, int64(0), int64(0), int64(0), 1
			n := *heldMiB << 10 // 8 MiB by default: 128 segments
			for i := range n {
				mustSend(t, q, body)
				m, ok := tryRecv(t, q)
				if !ok {
					t.Fatalf("message %d: nothing to receive", i)
				}
				if m.Offset == stuck {
					receives++ // failing: it came back, and fails again
					if m.Receives != receives || string(m.Body) != "stuck" {
						t.Fatalf("the stuck message came back with %d receives and body %q, want %d", m.Receives, m.Body, receives)
					}
					if m, ok = tryRecv(t, q); !ok {
						t.Fatalf("message %d: nothing to receive", i)
					}
				}
				mustDelete(t, q, m.Offset)
				if i%64 == 63 {
					clock.Advance(time.Second) // a checkpoint; a failing message's deadline passes
					// The checkpoint lands (and drops what lies below its
					// head) before the loop goes on, as it would within its
					// interval on a machine not this loaded: what is bounded
					// is the queue's steady state, not how late a goroutine
					// runs under -race.
					end := q.Stats().End
					for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Microsecond) {
						if r := q.ck.shown.Load(); r != nil && r.end == end {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("no checkpoint of end %d: %+v", end, q.Stats())
						}
					}
				}
				if i > n/8 && i%16 == 0 {
					segs, bytes, spare := dirUsage(t, dir)
					maxSegs, maxBytes, maxSpare = max(maxSegs, segs), max(maxBytes, bytes), max(maxSpare, spare)
					maxAll = max(maxAll, bytes+spare)
				}
			}
			st := q.Stats()
			t.Logf("at most %d segments, %d bytes in the directory (%d without the engine's spare files, %d in them); %d moves, %d receives of the stuck message",
				maxSegs, maxAll, maxBytes, maxSpare, st.Moved, receives)
			if limit := q.opts.MaxHeldSegments + 2; maxSegs > limit {
				t.Errorf("the message log held %d segments, more than MaxHeldSegments + 2 = %d", maxSegs, limit)
			}
			// Everything in the directory, the engine's spare files too:
			// the segments above (MaxHeldSegments + 2), the stuck
			// message's first segment, which its hand-out keeps mapped
			// after its drop renamed it for reuse, and the next segment
			// prepared ahead. A prepared segment made from a new file
			// allocates a quarter of one, but one made from a dropped file
			// is a whole one, and which of the two is there when the
			// directory is read depends on when the preparer ran: so
			// MaxHeldSegments + 4 whole segments, and one more for the
			// side logs and the index files (about 40 KB of it used).
			// 499 KB measured at most with a new prepared file; 552 KB
			// seen with one made from a dropped file.
			if limit := int64(q.opts.MaxHeldSegments+5) * segBytes; maxAll > limit {
				t.Errorf("the directory held %d bytes, more than (MaxHeldSegments + 5) segments = %d", maxAll, limit)
			}
			if st.Moved == 0 || st.Messages != 1 || (failing && receives < 10) {
				t.Errorf("nothing moved, or not one message left, or the failing one did not fail: %+v", st)
			}
			if t.Failed() {
				listDir(t, dir)
			}

		})
	}
}

// fillPast sends, receives and deletes n messages, with a head checkpoint
// every 64: the messages left live before them get moved.
func fillPast(t *testing.T, q *Queue, clock *fakeClock, n int) {
	t.Helper()
	for i := range n {
		off := mustSend(t, q, fmt.Sprint("filler ", i))
		m, ok := tryRecv(t, q)
		if !ok || m.Offset != off {
			t.Fatalf("filler %d (offset %d): got %v %+v", i, off, ok, m)
		}
		mustDelete(t, q, off)
		if i%64 == 63 && clock != nil {
			clock.Advance(time.Second)
		}
	}
}

// Moved messages keep working across a restart: an in-flight grouped one
// comes back first (ordered by its offset, before a later message), keeps
// its body, receive count and group (its group's next one waits for it),
// a delayed one keeps its due time, and deleted moved messages stay
// deleted.
func TestQueueMovedRestart(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	opts := func(o *Options) {
		o.Visibility = time.Hour
		o.MaxReceives = 100 // receive counts survive the restart
	}
	q := openTestQueue(t, dir, clock, opts)
	a := mustSendWith(t, q, "a", SendOptions{Group: "g"})
	b := mustSendWith(t, q, "b", SendOptions{Group: "g"})
	c := mustSendWith(t, q, "c", SendOptions{Delay: 2 * time.Hour})
	if m, ok := tryRecv(t, q); !ok || m.Offset != a {
		t.Fatalf("first hand-out: %v %+v", ok, m)
	}
	fillPast(t, q, clock, 1500)
	if st := q.Stats(); st.Moved < 3 || q.log.First() <= c {
		t.Fatalf("the held messages were not moved: %+v, log from %d", st, q.log.First())
	}
	e := mustSend(t, q, "e") // not received before the restart
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock, opts)
	var got []Message
	for {
		m, ok := tryRecv(t, q)
		if !ok {
			break
		}
		got = append(got, m)
	}
	if len(got) != 2 || got[0].Offset != a || string(got[0].Body) != "a" || got[0].Receives != 2 || got[0].Group != "g" || got[1].Offset != e {
		t.Fatalf("after the restart, hand-outs %+v: want a (%d, receives 2, group g) then e (%d)", got, a, e)
	}
	mustDelete(t, q, a)
	m, ok := tryRecv(t, q)
	if !ok || m.Offset != b || string(m.Body) != "b" || m.Group != "g" {
		t.Fatalf("after a's delete: %v %+v, want b (%d)", ok, m, b)
	}
	mustDelete(t, q, b)
	if m, ok := tryRecv(t, q); ok {
		t.Fatalf("c handed out before its due time: %+v", m)
	}
	clock.Advance(2 * time.Hour)
	m, ok = tryRecv(t, q)
	if !ok || m.Offset != c || string(m.Body) != "c" {
		t.Fatalf("after c's due time: %v %+v, want c (%d)", ok, m, c)
	}
	mustDelete(t, q, c)
	mustDelete(t, q, e)
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock, opts)
	defer mustCloseQueue(t, q)
	clock.Advance(time.Hour)
	if ms := drain(t, q); len(ms) != 0 {
		t.Fatalf("deleted messages came back: %+v", ms)
	}
	if st := q.Stats(); st.Messages != 0 {
		t.Fatalf("after the second restart: %+v", st)
	}
}

// A crash in the middle of a move (the copies appended, the head
// checkpoint not written, the old segment not removed) hands each moved
// message out again, never loses it: exactly once after a process crash
// (the files as they are), at least once after a power failure (the files
// as powerCopy leaves them: the unsynced copies may be torn, the originals
// are there).
func TestQueueMovedCrashMidMove(t *testing.T) {
	for round := range 2 * *crashRounds {
		power := round%2 == 1
		dir := t.TempDir()
		sd := newSyncDisk(t, dir)
		clock := newFakeClock()
		q := openTestQueue(t, dir, clock, func(o *Options) {
			o.Visibility = time.Hour
			o.CheckpointInterval = time.Hour
			o.MaxReceives = 100
		})
		q.ck.mu.Lock() // neither a checkpoint nor a move runs but ours
		var stuck []uint64
		for i := range 3 {
			off := mustSend(t, q, fmt.Sprint("stuck ", i))
			if m, ok := tryRecv(t, q); !ok || m.Offset != off {
				t.Fatalf("stuck %d: %v %+v", i, ok, m)
			}
			stuck = append(stuck, off)
		}
		fillPast(t, q, nil, 800)
		if err := errors.Join(q.log.Sync(), q.dels.Sync()); err != nil {
			t.Fatal(err) // what came before the move is durable
		}
		n, err := q.moveHeld(false)
		if err != nil || n != len(stuck) {
			q.ck.mu.Unlock()
			t.Fatalf("round %d: moved %d, %v; want %d", round, n, err, len(stuck))
		}
		disk := t.TempDir()
		if power {
			var st syncDiskStats
			powerCopy(t, rand.New(rand.NewPCG(uint64(round), 1)), sd, disk, &st)
		} else {
			testkit.MustCopyDir(t, dir, disk, true)
		}
		q.ck.mu.Unlock()
		mustCloseQueue(t, q)

		q = openTestQueue(t, disk, clock, func(o *Options) { o.Visibility = time.Hour })
		seen := map[uint64]int{}
		for {
			m, ok, err := q.TryReceive()
			if !ok {
				break
			}
			if err == nil && !strings.HasPrefix(string(m.Body), "stuck") && !(power && strings.HasPrefix(string(m.Body), "filler")) {
				t.Errorf("round %d: offset %d handed out with body %q", round, m.Offset, m.Body)
			}
			if err != nil && !power {
				t.Errorf("round %d: offset %d damaged after a process crash: %v", round, m.Offset, err)
			}
			if err == nil && strings.HasPrefix(string(m.Body), "stuck") {
				seen[m.Offset]++
			}
			mustDelete(t, q, m.Offset)
		}
		for i, off := range stuck {
			switch {
			case seen[off] == 0:
				t.Errorf("round %d (power %v): moved message %d (offset %d) lost", round, power, i, off)
			case seen[off] > 1:
				t.Errorf("round %d (power %v): moved message %d (offset %d) handed out %d times", round, power, i, off, seen[off])
			}
		}
		mustCloseQueue(t, q)
		q = openTestQueue(t, disk, clock, nil...)
		if ms := drain(t, q); len(ms) != 0 {
			t.Errorf("round %d: deleted after the crash, back after a restart: %+v", round, ms)
		}
		mustCloseQueue(t, q)
	}
}

// The features of the queue keep working with moved messages while it
// runs: a grouped message's next one waits for it, a delayed one keeps its
// due time, a failing one goes to the dead letters with its offset and
// count, and a remembered dedup id keeps its segment from being moved
// until the window passes.
func TestQueueMovedFeatures(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock, func(o *Options) {
		o.Visibility = time.Hour
		o.MaxReceives = 2
		o.DedupWindow = time.Minute
	})
	defer mustCloseQueue(t, q)
	a := mustSendWith(t, q, "a", SendOptions{Group: "g"})
	b := mustSendWith(t, q, "b", SendOptions{Group: "g"})
	c := mustSendWith(t, q, "c", SendOptions{Delay: 3 * time.Hour})
	d := mustSendWith(t, q, "d", SendOptions{DedupID: "d"})
	for _, want := range []uint64{a, d} {
		if m, ok := tryRecv(t, q); !ok || m.Offset != want {
			t.Fatalf("hand-out: %v %+v, want %d", ok, m, want)
		}
	}
	for range 30 {
		fillPast(t, q, nil, 64)
		clock.Advance(time.Second) // a checkpoint; the window not passed
	}
	if q.Stats().Moved != 0 || q.log.First() != a {
		t.Fatalf("moved while a dedup id of the segment is remembered: %+v", q.Stats())
	}
	clock.Advance(time.Minute) // the window passes: the segment may go
	fillPast(t, q, clock, 1000)
	if st := q.Stats(); st.Moved < 4 || q.log.First() <= d {
		t.Fatalf("not moved once the window passed: %+v, log from %d", st, q.log.First())
	}
	if off := mustSendWith(t, q, "d again", SendOptions{DedupID: "d"}); off == d {
		t.Fatalf("dedup id remembered past its window")
	}

	mustDelete(t, q, a) // the group's next one comes
	m, ok := tryRecv(t, q)
	if !ok || m.Offset != b || string(m.Body) != "b" || m.Group != "g" {
		t.Fatalf("after a's delete: %v %+v, want b (%d)", ok, m, b)
	}
	mustDelete(t, q, b)
	m, ok = tryRecv(t, q) // the new "d again"
	if !ok || string(m.Body) != "d again" {
		t.Fatalf("want the second dedup send: %v %+v", ok, m)
	}
	mustDelete(t, q, m.Offset)

	clock.Advance(time.Hour) // d's deadline passes: its second hand-out
	m, ok = tryRecv(t, q)
	if !ok || m.Offset != d || string(m.Body) != "d" || m.Receives != 2 {
		t.Fatalf("d's second hand-out: %v %+v, want offset %d receives 2", ok, m, d)
	}
	if _, ok := tryRecv(t, q); ok {
		t.Fatal("c handed out before its due time")
	}
	clock.Advance(2 * time.Hour) // c is due; d used up its receives
	m, ok = tryRecv(t, q)
	if !ok || m.Offset != c || string(m.Body) != "c" {
		t.Fatalf("c after its due time: %v %+v, want %d", ok, m, c)
	}
	mustDelete(t, q, c)
	var dead []Stored
	waitFor(t, "the dead letter", func() bool {
		dead = dead[:0]
		if err := Messages(q.DeadLetter().Dir(), func(s Stored) bool {
			s.Body = slices.Clone(s.Body) // valid until the callback returns
			dead = append(dead, s)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return len(dead) == 1
	})
	if s := dead[0]; string(s.Body) != "d" || !s.HasOrigin || s.Origin != d || s.Receives != 2 || s.DedupID != "d" {
		t.Fatalf("dead letter %+v, want body d, origin %d, receives 2, dedup id d", s, d)
	}
	if st := q.Stats(); st.Messages != 0 || st.DeadLettered != 1 {
		t.Fatalf("at the end: %+v", st)
	}
}

func TestQueueMaxHeldSegmentsOption(t *testing.T) {
	_, err := Open(t.TempDir(), Options{MaxHeldSegments: -1})
	if !errors.Is(err, engine.ErrBadOptions) || !strings.Contains(err.Error(), "MaxHeldSegments -1") {
		t.Fatalf("MaxHeldSegments -1: %v, want ErrBadOptions naming it", err)
	}
	q, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mustCloseQueue(t, q)
	if q.opts.MaxHeldSegments != DefaultMaxHeldSegments || q.DeadLetter() != nil {
		t.Fatalf("MaxHeldSegments 0 gives %d, want the default %d", q.opts.MaxHeldSegments, DefaultMaxHeldSegments)
	}
}

// TestQueueMovedKill9: a child process keeps three messages in flight and
// passes others through with a head checkpoint every millisecond, so that
// moves and drops run all the time, and is killed at a random moment. The
// reopened queue hands each stuck message out once, with its offset, body
// and receive count; every message sent and not deleted comes back, none
// whose delete returned does.
func TestQueueMovedKill9(t *testing.T) {
	if dir := os.Getenv("PAGELOG_QUEUE_MOVED_DIR"); dir != "" {
		movedChild(dir)
		return
	}
	t.Parallel()
	for round := range *crashRounds {
		dir := t.TempDir()
		cmd, pipe, stderr := startChild(t, "TestQueueMovedKill9", "PAGELOG_QUEUE_MOVED_DIR="+dir)
		stuck := map[uint64]string{}
		sent, deleting, deleted := map[uint64]string{}, map[uint64]bool{}, map[uint64]bool{}
		moves := 0
		busy, done := make(chan struct{}), make(chan struct{})
		var busyOnce sync.Once
		go func() {
			defer close(done)
			defer busyOnce.Do(func() { close(busy) })
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				var kind, body string
				var off uint64
				if _, err := fmt.Sscanf(sc.Text(), "%s %d %s", &kind, &off, &body); err != nil {
					continue
				}
				switch kind {
				case "stuck":
					stuck[off] = body
				case "sent":
					sent[off] = body
				case "deleting":
					deleting[off] = true // its Delete may have returned, or not
				case "deleted":
					deleted[off] = true
				case "moved":
					moves = int(off)
				}
				if len(deleted) >= 300 && moves > 0 {
					busyOnce.Do(func() { close(busy) })
				}
			}
		}()
		select {
		case <-busy: // the child runs, and its moves have begun (a few hundred messages in)
		case <-time.After(30 * time.Second):
		}
		time.Sleep(time.Duration(rand.IntN(500)) * time.Millisecond)
		killChild(t, cmd, done, stderr)
		if len(stuck) != 3 || len(deleted) < 200 || moves == 0 {
			t.Fatalf("round %d: the child did too little: %d stuck, %d deleted, %d moves\nstderr: %s", round, len(stuck), len(deleted), moves, stderr.String())
		}
		q, err := Open(dir, movedChildOptions())
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		seen := map[uint64]int{}
		for {
			m, ok, err := q.TryReceive()
			if !ok {
				if err != nil {
					t.Fatal(err)
				}
				break
			}
			if err != nil {
				t.Errorf("round %d: offset %d damaged after kill -9: %v", round, m.Offset, err)
				continue
			}
			seen[m.Offset]++
			if body, ok := stuck[m.Offset]; ok {
				if string(m.Body) != body || m.Receives != 2 {
					t.Errorf("round %d: stuck message %d came back with body %q, %d receives; want %q, 2", round, m.Offset, m.Body, m.Receives, body)
				}
			} else if body, ok := sent[m.Offset]; !ok && !strings.HasPrefix(string(m.Body), "filler-") || ok && string(m.Body) != body {
				t.Errorf("round %d: offset %d came back with body %q (sent %q)", round, m.Offset, m.Body, body)
			}
			if deleted[m.Offset] {
				t.Errorf("round %d: offset %d came back, its Delete returned", round, m.Offset)
			}
		}
		for off := range stuck {
			if seen[off] != 1 {
				t.Errorf("round %d: stuck message %d handed out %d times after the kill, want once", round, off, seen[off])
			}
		}
		for off := range sent {
			if !deleting[off] && seen[off] == 0 {
				t.Errorf("round %d: message %d sent, not deleted, lost", round, off)
			}
		}
		t.Logf("round %d: %d sent, %d deleted, %d moves before the kill; %d handed out after", round, len(sent), len(deleted), moves, len(seen))
		mustCloseQueue(t, q)
	}
}

// startChild starts this test binary running test alone, with env added
// to its environment, and returns its stdout and what it writes to stderr.
func startChild(t *testing.T, test string, env ...string) (*exec.Cmd, io.Reader, *bytes.Buffer) {
	t.Helper()
	cmd := testkit.Child(test, env...)
	stdout, stderr := testkit.StartChild(t, cmd)
	return cmd, stdout, stderr
}

// killChild kills cmd with SIGKILL, waits for done (its stdout read to
// the end) and fails unless the kill is what ended it.
func killChild(t *testing.T, cmd *exec.Cmd, done <-chan struct{}, stderr *bytes.Buffer) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
	err := cmd.Wait()
	if !testkit.KilledBySIGKILL(err) {
		t.Fatalf("child: %v, want it killed\nstderr: %s", err, stderr.String())
	}
}

func movedChildOptions() Options {
	return Options{
		Log:                engine.Options{SegmentBytes: 4096},
		Visibility:         time.Hour,
		CheckpointInterval: time.Millisecond,
		MaxReceives:        100,
	}
}

// movedChild is TestQueueMovedKill9's child: it runs until killed.
func movedChild(dir string) {
	q, err := Open(dir, movedChildOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	}
	for i := range 3 {
		body := fmt.Sprint("stuck-", i)
		off, err := q.Send([]byte(body))
		if err != nil {
			fail(err)
		}
		if m, ok, err := q.TryReceive(); !ok || err != nil || m.Offset != off {
			fail(fmt.Errorf("stuck %d: %v %v", i, ok, err))
		}
		fmt.Printf("stuck %d %s\n", off, body)
	}
	for i := 0; ; i++ {
		body := fmt.Sprint("filler-", i)
		off, err := q.Send([]byte(body))
		if err != nil {
			fail(err)
		}
		fmt.Printf("sent %d %s\n", off, body)
		m, ok, err := q.TryReceive()
		if !ok || err != nil {
			fail(fmt.Errorf("filler %d: %v %v", i, ok, err))
		}
		fmt.Printf("deleting %d x\n", m.Offset)
		if err := q.Delete(m.Offset); err != nil {
			fail(err)
		}
		fmt.Printf("deleted %d x\n", m.Offset)
		if i%64 == 0 {
			fmt.Printf("moved %d x\n", q.Stats().Moved)
		}
	}
}

// moveSyncGate is a message log whose moves' syncs a test holds: once
// armed, an append of moved copies that waits for its sync, and every
// WaitDurable, stops until release is closed, after telling entered.
type moveSyncGate struct {
	messageLog
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *moveSyncGate) hold() {
	g.entered <- struct{}{}
	<-g.release
}

func (g *moveSyncGate) AppendBatch(bodies [][]byte, attrs []*engine.Attrs) (uint64, int, error) {
	first, n, err := g.messageLog.AppendBatch(bodies, attrs)
	if g.armed.Load() && len(attrs) > 0 && attrs[0] != nil && attrs[0].HasMoved {
		g.hold() // the sync of a move: under SyncAlways AppendBatch waits for it
	}
	return first, n, err
}

func (g *moveSyncGate) WaitDurable(ctx context.Context, off uint64) error {
	if g.armed.Load() {
		g.hold()
	}
	return g.messageLog.WaitDurable(ctx, off)
}

// Under SyncAlways a move of held messages waits for its copies' sync
// without the queue's lock: while that sync is held, another receiver and
// deleter go on, the head stays on the original, and a Delete of the
// moved message returns only once its copy is durable.
func TestMoveSyncHoldsNoReceiverOrDeleter(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) {
		o.Log.Sync = engine.SyncAlways
		o.Visibility = time.Hour
		o.CheckpointInterval = time.Hour
	})
	gate := &moveSyncGate{entered: make(chan struct{}, 4), release: make(chan struct{})}
	released := false
	free := func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	defer free()
	q.ck.mu.Lock() // no checkpoint and no move runs but the test's
	locked := true
	defer func() {
		if locked {
			q.ck.mu.Unlock()
		}
	}()
	stuck := mustSend(t, q, "stuck")
	if m, ok := tryRecv(t, q); !ok || m.Offset != stuck {
		t.Fatalf("stuck: %v %+v", ok, m)
	}
	fillPast(t, q, nil, 800)
	inFlight := mustSend(t, q, "in flight")
	if m, ok := tryRecv(t, q); !ok || m.Offset != inFlight {
		t.Fatalf("in flight: %v %+v", ok, m)
	}
	ready := mustSend(t, q, "ready")
	// From here on the test sends nothing (appendTo knows only the
	// queue's own log types), and no goroutine of the queue runs: the
	// checkpoints wait for q.ck.mu.
	gate.messageLog = q.log
	q.log = gate

	watchdog := func(what string, done <-chan struct{}) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: still waiting after a minute", what)
		}
	}
	gate.armed.Store(true)
	type result struct {
		n   int
		err error
	}
	moved := make(chan result, 1)
	go func() {
		n, err := q.moveHeld(false)
		moved <- result{n, err}
	}()
	watchdog("the move's sync", gate.entered)

	// The move's sync is held: a receiver and a deleter go on.
	done := make(chan struct{})
	var got Message
	var ok bool
	var rerr, derr error
	go func() {
		defer close(done)
		derr = q.Delete(inFlight)
		got, ok, rerr = q.TryReceive()
	}()
	watchdog("a Delete and a Receive while a move waits for its sync", done)
	if derr != nil || rerr != nil || !ok || got.Offset != ready || string(got.Body) != "ready" {
		t.Fatalf("beside the move: delete %v; receive %v %v %+v, want offset %d", derr, ok, rerr, got, ready)
	}
	q.mu.Lock()
	head := q.t.Head()
	q.mu.Unlock()
	if head > stuck {
		t.Fatalf("head %d passed the moved message's original %d before its copy was durable", head, stuck)
	}

	// A Delete of the moved message waits for its copy's sync.
	deleted := make(chan error, 1)
	go func() { deleted <- q.Delete(stuck) }()
	watchdog("the Delete of the moved message waiting for its copy", gate.entered)
	free()
	var res result
	select {
	case res = <-moved:
	case <-time.After(time.Minute):
		t.Fatal("the move did not end after its sync was let go")
	}
	if res.n != 1 || res.err != nil {
		t.Fatalf("move: %d, %v; want 1 moved", res.n, res.err)
	}
	if err := <-deleted; err != nil {
		t.Fatalf("Delete of the moved message: %v", err)
	}
	gate.armed.Store(false)
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}
	q.ck.mu.Unlock()
	locked = false
	if st := q.Stats(); st.Moved != 1 || st.Head <= stuck || st.Messages != 1 {
		t.Fatalf("after the move: %+v", st)
	}
	dir := q.Dir()
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	if ms := drain(t, q); len(ms) != 1 || ms[0].Offset != ready {
		t.Fatalf("after a restart: %+v, want only %d", ms, ready)
	}
}

// Open finds moved copies through the index queue.head keeps of them, and
// through the log when that index is missing (a file of version 3),
// damaged, or disagrees with the log: the same messages come back each
// time, the moved one by its offset, and a damaged index costs only the
// index (the head stays trusted).
func TestOpenFindsMovedCopiesThroughHeadIndex(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock, func(o *Options) { o.Visibility = time.Hour })
	stuck := mustSend(t, q, "stuck")
	if m, ok := tryRecv(t, q); !ok || m.Offset != stuck {
		t.Fatalf("stuck: %v %+v", ok, m)
	}
	fillPast(t, q, clock, 1500)
	want := map[uint64]string{stuck: "stuck"}
	var backlog []uint64
	for i := range 40 {
		body := fmt.Sprint("backlog ", i)
		off := mustSend(t, q, body)
		want[off] = body
		backlog = append(backlog, off)
	}
	if st := q.Stats(); st.Moved == 0 || st.Head <= stuck {
		t.Fatalf("no move: %+v", st)
	}
	mustCloseQueue(t, q)
	b, err := os.ReadFile(filepath.Join(dir, headName))
	if err != nil {
		t.Fatal(err)
	}
	h, idx, err := readHeadIndexed(dir)
	if err != nil || b[0] != headVersion || !idx.ok || len(idx.runs) == 0 {
		t.Fatalf("queue.head version %d: %+v %+v %v, want an index of the copies", b[0], h, idx, err)
	}
	lie := func(runs ...[2]uint64) []byte {
		return encodeHeadIndexed(h, movedIndex{runs: runs, ok: true})
	}
	damaged := slices.Clone(b)
	damaged[headSize+1] ^= 0x40
	cases := []struct {
		name string
		head []byte
		from string
	}{
		{"index", b, "queue.head index"},
		{"version 3", encodeHead(h), "log (no index (queue.head of an older version))"},
		{"index damaged", damaged, "log (index damaged"},
		{"index names a message that is no copy", lie([2]uint64{backlog[3], backlog[3] + 1}), "log (index disagrees with the log"},
		{"index past the end", lie([2]uint64{h.end, h.end + 1}), "log (index disagrees with the log"},
	}
	for _, c := range cases {
		d := t.TempDir()
		testkit.MustCopyDir(t, dir, d, true)
		if err := os.WriteFile(filepath.Join(d, headName), c.head, 0o600); err != nil {
			t.Fatal(err)
		}
		q := openTestQueue(t, d, clock)
		rec := q.Recovery()
		if rec.HeadFrom != "checkpoint" || rec.Head != h.head || !strings.HasPrefix(rec.MovedFrom, c.from) {
			t.Errorf("%s: head from %q at %d, moved from %q; want the checkpoint's %d, moved from %q", c.name, rec.HeadFrom, rec.Head, rec.MovedFrom, h.head, c.from)
		}
		got := map[uint64]string{}
		for {
			m, ok, err := q.TryReceive()
			if !ok {
				break
			}
			if err != nil {
				t.Errorf("%s: offset %d: %v", c.name, m.Offset, err)
			}
			if _, dup := got[m.Offset]; dup {
				t.Errorf("%s: offset %d handed out twice", c.name, m.Offset)
			}
			got[m.Offset] = string(m.Body)
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: got %d messages %v, want %d", c.name, len(got), got, len(want))
		}
		mustCloseQueue(t, q)
	}
}

// An index of moved copies that names a run of offsets the log holds no
// record of (a queue.head whose end and run a tool, or damage that kept
// the checksums, put far past the log) costs open one step over the
// missing range, not one read per offset: open returns, from the log, and
// every message comes back.
func TestHeadIndexOverAHugeMissingRangeIsOneStep(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	want := map[uint64]string{}
	for i := range 10 {
		body := fmt.Sprint("message ", i)
		want[mustSend(t, q, body)] = body
	}
	mustCloseQueue(t, q)
	h, _, err := readHeadIndexed(dir)
	if err != nil {
		t.Fatal(err)
	}
	const lost = 1 << 40
	run := [2]uint64{h.end, h.end + lost}
	h.end += lost
	b := encodeHeadIndexed(h, movedIndex{runs: [][2]uint64{run}, ok: true})
	if err := os.WriteFile(filepath.Join(dir, headName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan *Queue, 1)
	go func() { opened <- openTestQueue(t, dir, clock) }()
	select {
	case q = <-opened:
	case <-time.After(2 * time.Minute):
		t.Fatalf("open still reading the run [%d, %d) one offset at a time", run[0], run[1])
	}
	defer mustCloseQueue(t, q)
	got := map[uint64]string{}
	for _, m := range receiveAll(t, q) {
		got[m.Offset] = string(m.Body)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
