package queue

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// verifyLogRO checks a log of the queue read-only: healthy.
func verifyLogRO(t *testing.T, dir, what string) {
	t.Helper()
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatalf("%s: OpenReadOnly: %v", what, err)
	}
	defer l.Close()
	rep, err := l.Verify(nil)
	if err != nil {
		t.Fatalf("%s: Verify: %v", what, err)
	}
	if !rep.Healthy() {
		t.Errorf("%s: not healthy: damaged %d missing %d %q %q", what, rep.Damaged, rep.Missing, rep.Problems, rep.IndexProblems)
	}
}

// A queue whose message log's SegmentBytes changes between opens (64 MiB,
// 64 KiB, 64 MiB, 4 KiB, 64 KiB): its delete log is opened with 1 MiB,
// 16 KiB, 1 MiB, 4 KiB, 16 KiB segments, its active segment holding
// records past the smaller sizes. At every reopen, and in a copy of the
// open queue's files (as a kill leaves them) opened with other sizes,
// every message not deleted is handed out and no deleted one; Stat agrees,
// and the message and delete logs verify.
func TestQueueSegmentBytesChanges(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	live := map[uint64]bool{} // sent and not deleted
	next := 0
	for phase, sb := range []int64{64 << 20, 64 << 10, 64 << 20, 4 << 10, 64 << 10} {
		q := openTestQueue(t, dir, clock, func(o *Options) { o.Log.SegmentBytes = sb })
		rec := q.Recovery()
		t.Logf("phase %d (SegmentBytes %d): delete log %d segments, active ends at %d (clean %v)",
			phase, sb, rec.Deletes.Segments, rec.Deletes.Active.End, rec.Deletes.Clean)
		if got, want := q.dels.SegmentBytes(), min(1<<20, max(sb/4, 4<<10)); got != want {
			t.Fatalf("delete log's SegmentBytes %d, want %d", got, want)
		}
		if (phase == 1 || phase == 3) && rec.Deletes.Active.End <= q.dels.SegmentBytes() {
			t.Fatalf("phase %d: the delete log's active segment ends at %d, within its new segment size %d: the case is missed",
				phase, rec.Deletes.Active.End, q.dels.SegmentBytes())
		}
		// Everything not deleted is handed out again after the reopen.
		want := make([]uint64, 0, len(live))
		for off := range live {
			want = append(want, off)
		}
		slices.Sort(want)
		got := drain(t, q)
		if !slices.Equal(offsetsOf(got), want) {
			t.Fatalf("phase %d: handed out %d messages, want %d (first got %v, want %v)",
				phase, len(got), len(want), offsetsOf(got)[:min(len(got), 10)], want[:min(len(want), 10)])
		}
		for _, m := range got {
			if string(m.Body) != fmt.Sprint("body ", m.Offset) {
				t.Fatalf("phase %d: message %d has body %q", phase, m.Offset, m.Body)
			}
		}
		// Half of the old ones deleted, then new ones sent, handed out and
		// two thirds of them deleted; offset 0 and every third stay, so
		// the head stays and the delete log keeps its records (but in the
		// last phases, where everything old goes).
		for i, m := range got {
			if (i%2 == 0 || phase >= 3) && (m.Offset != 0 || phase >= 3) {
				mustDelete(t, q, m.Offset)
				delete(live, m.Offset)
			}
			if i%200 == 199 {
				clock.Advance(time.Second)
			}
		}
		for range 1500 {
			off := mustSend(t, q, fmt.Sprint("body ", next))
			if off != uint64(next) {
				t.Fatalf("sent at %d, want %d", off, next)
			}
			live[off] = true
			next++
		}
		for i, m := range drain(t, q) {
			if m.Offset%3 != 0 {
				mustDelete(t, q, m.Offset)
				delete(live, m.Offset)
			}
			if i%200 == 199 {
				clock.Advance(time.Second)
			}
		}
		clock.Advance(time.Second)
		if st := q.Stats(); st.Messages != uint64(len(live)) {
			t.Fatalf("phase %d: Stats says %d messages, want %d", phase, st.Messages, len(live))
		}
		// A copy of the open queue's files, as a kill would leave them,
		// opened with other segment sizes: the same messages, none deleted
		// comes back.
		crashed := t.TempDir()
		testkit.MustCopyDir(t, dir, crashed, true)
		c := openTestQueue(t, crashed, clock, func(o *Options) { o.Log.SegmentBytes = 4 << 10 })
		if got := drain(t, c); len(got) != len(live) {
			t.Errorf("phase %d: the copy hands out %d messages, want %d", phase, len(got), len(live))
		} else {
			for _, m := range got {
				if !live[m.Offset] {
					t.Fatalf("phase %d: the copy hands out %d, deleted", phase, m.Offset)
				}
			}
		}
		mustCloseQueue(t, c)
		mustCloseQueue(t, q)
		st, err := Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages != uint64(len(live)) {
			t.Fatalf("phase %d: Stat says %d messages, want %d", phase, st.Messages, len(live))
		}
		verifyLogRO(t, dir, fmt.Sprintf("phase %d: message log", phase))
		verifyLogRO(t, filepath.Join(dir, deletesDir), fmt.Sprintf("phase %d: delete log", phase))
	}
}

// Dead letters through small segments: every message received
// MaxReceives times is moved, with its body, across reopens that change
// the segment sizes of the message log (and so of the delete and
// receive-count logs).
func TestQueueDeadLettersSmallSegments(t *testing.T) {
	dir, deadDir := t.TempDir(), filepath.Join(t.TempDir(), "dead")
	clock := newFakeClock()
	moved := 0
	sent := 0
	for phase, sb := range []int64{4 << 10, 64 << 10, 1 << 20, 4 << 10} {
		q := openTestQueue(t, dir, clock, func(o *Options) {
			o.Log.SegmentBytes = sb
			o.MaxReceives = 2
			o.DeadLetterDir = deadDir
		})
		for range 200 {
			mustSend(t, q, fmt.Sprint("body ", sent))
			sent++
		}
		// Each one received twice, never deleted: moved at its second
		// deadline; one in ten deleted after its first receive instead.
		for round := range 2 {
			for _, m := range drain(t, q) {
				if string(m.Body) != fmt.Sprint("body ", m.Offset) {
					t.Fatalf("message %d has body %q", m.Offset, m.Body)
				}
				if round == 0 && m.Offset%10 == 0 {
					mustDelete(t, q, m.Offset)
				}
			}
			clock.Advance(testVisibility)
		}
		moved += 180
		st := q.Stats()
		if st.Messages != 0 || st.DeadLetters != uint64(moved) {
			t.Fatalf("phase %d: %d messages, %d dead letters; want 0 and %d", phase, st.Messages, st.DeadLetters, moved)
		}
		mustCloseQueue(t, q)
		if d, err := Stat(deadDir); err != nil || d.Messages != uint64(moved) {
			t.Fatalf("phase %d: the dead-letter queue: %d messages, %v; want %d", phase, d.Messages, err, moved)
		}
		verifyLogRO(t, filepath.Join(dir, receivesDir), fmt.Sprintf("phase %d: receive-count log", phase))
		verifyLogRO(t, filepath.Join(dir, deletesDir), fmt.Sprintf("phase %d: delete log", phase))
		verifyLogRO(t, deadDir, fmt.Sprintf("phase %d: dead letters", phase))
	}
	d := openTestQueue(t, deadDir, clock)
	defer mustCloseQueue(t, d)
	got := drain(t, d)
	if len(got) != moved {
		t.Fatalf("%d dead letters handed out, want %d", len(got), moved)
	}
	for i, m := range got {
		body, a := recAttrs(t, d, m.Offset)
		if !a.HasOrigin || body != fmt.Sprint("body ", a.Origin) || a.Origin%10 == 0 || a.Receives != 2 {
			t.Fatalf("dead letter %d: %q, %+v", i, body, a)
		}
	}
}
