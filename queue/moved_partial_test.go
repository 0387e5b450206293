package queue

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// The partial moves of held messages (liveIn, moveHeld) lose and repeat
// nothing: many held messages, in flight, delayed and grouped, gathered
// into one segment by a first series of moves, then moved out of it again
// at most MaxMovedPerSegment at a time; between two of those moves messages are
// deleted, released, redelivered, dead-lettered, come due, the queue is
// copied as a crash would leave it and closed and opened again. Every
// message comes back once, with its offset, body, receive count, group
// order and due time.

const (
	partialPlain   = iota // received once, held in flight
	partialNear           // delayed partialNearDelay: comes due in the middle of the moves
	partialFar            // delayed partialFarDelay: due after everything
	partialGrouped        // in one of partialGroups groups: the front in flight, the others waiting
)

const (
	partialNearDelay   = 3 * time.Hour
	partialFarDelay    = 100 * time.Hour
	partialVisibility  = 10 * time.Hour
	partialGroups      = 5
	partialMaxReceives = 4
)

type partialMsg struct {
	key   uint64
	body  string
	group string
	kind  int
	recv  int  // hand-outs so far
	gone  bool // deleted or dead-lettered
}

type partialModel struct {
	msgs    map[uint64]*partialMsg
	groups  map[string][]uint64 // keys in send order, gone ones included
	nearDue bool                // the near delays have passed
}

func (m *partialModel) clone() *partialModel {
	c := &partialModel{msgs: map[uint64]*partialMsg{}, groups: map[string][]uint64{}, nearDue: m.nearDue}
	for k, x := range m.msgs {
		y := *x
		c.msgs[k] = &y
	}
	for g, ks := range m.groups {
		c.groups[g] = slices.Clone(ks)
	}
	return c
}

// front returns the key of group g's first message not gone.
func (m *partialModel) front(g string) (uint64, bool) {
	for _, k := range m.groups[g] {
		if !m.msgs[k].gone {
			return k, true
		}
	}
	return 0, false
}

// live returns the keys not gone, sorted.
func (m *partialModel) live() []uint64 {
	var ks []uint64
	for k, x := range m.msgs {
		if !x.gone {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// readyAfterReset returns the messages that are ready once every deadline
// has passed (or after a reopen): the plain ones, the near delayed ones
// once due, the far ones when far, and each group's front.
func (m *partialModel) readyAfterReset(far bool) map[uint64]bool {
	want := map[uint64]bool{}
	for k, x := range m.msgs {
		if x.gone {
			continue
		}
		switch x.kind {
		case partialPlain:
			want[k] = true
		case partialNear:
			if m.nearDue || far {
				want[k] = true
			}
		case partialFar:
			if far {
				want[k] = true
			}
		}
	}
	for g := range m.groups {
		if k, ok := m.front(g); ok {
			want[k] = true
		}
	}
	return want
}

// partialTake receives every ready message and checks that they are exactly
// want, each once, with its body, group and receive count; they stay in
// flight. It returns them by key.
func partialTake(t *testing.T, q *Queue, m *partialModel, want map[uint64]bool, phase string) map[uint64]Message {
	t.Helper()
	got := map[uint64]Message{}
	for _, msg := range receiveAll(t, q) {
		x, ok := m.msgs[msg.Offset]
		switch {
		case !ok:
			t.Fatalf("%s: unknown message %d handed out (%q)", phase, msg.Offset, msg.Body)
		case x.gone:
			t.Fatalf("%s: message %d (%q) handed out after its delete or dead-lettering", phase, msg.Offset, msg.Body)
		case !want[msg.Offset]:
			t.Fatalf("%s: message %d (%q, kind %d, group %q) handed out, not expected now", phase, msg.Offset, msg.Body, x.kind, x.group)
		}
		if _, dup := got[msg.Offset]; dup {
			t.Fatalf("%s: message %d handed out twice", phase, msg.Offset)
		}
		if string(msg.Body) != x.body || msg.Group != x.group || msg.Receives != x.recv+1 {
			t.Fatalf("%s: message %d came back as body %q group %q receives %d; want %q %q %d",
				phase, msg.Offset, msg.Body, msg.Group, msg.Receives, x.body, x.group, x.recv+1)
		}
		x.recv++
		got[msg.Offset] = msg
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			x := m.msgs[k]
			t.Fatalf("%s: message %d (%q, kind %d, group %q, %d receives) not handed out: lost (%d of %d came)",
				phase, k, x.body, x.kind, x.group, x.recv, len(got), len(want))
		}
	}
	return got
}

// partialDrain receives and deletes everything that becomes ready, group by
// group in order, checking each message once; far tells whether the far
// delays have passed.
func partialDrain(t *testing.T, q *Queue, m *partialModel, far bool, phase string) {
	t.Helper()
	for round := 0; ; round++ {
		want := m.readyAfterReset(far)
		if round > 0 {
			// After the first round only the groups' next fronts come.
			for k := range want {
				if m.msgs[k].kind != partialGrouped {
					delete(want, k)
				}
			}
		}
		if len(want) == 0 {
			if ms := receiveAll(t, q); len(ms) != 0 {
				t.Fatalf("%s: %d messages handed out beyond the model, first %d (%q)", phase, len(ms), ms[0].Offset, ms[0].Body)
			}
			return
		}
		got := partialTake(t, q, m, want, fmt.Sprintf("%s, round %d", phase, round))
		for _, k := range slices.Sorted(maps.Keys(got)) {
			mustDelete(t, q, k)
			m.msgs[k].gone = true
		}
	}
}

type partialQueue struct {
	t     *testing.T
	dir   string
	clock *fakeClock
	q     *Queue
	m     *partialModel
	raw   map[uint64][]byte // bodies of the first hand-outs, as handed out (nil: not kept)
}

func partialOptions(o *Options) {
	o.Log.SegmentBytes = 64 << 10
	o.Visibility = partialVisibility
	o.MaxHeldSegments = 1
	o.MaxReceives = partialMaxReceives
}

func (a *partialQueue) open() {
	a.q = openEarlyQueue(a.t, a.dir, a.clock, partialOptions)
}

// nextSegment sends and deletes fillers until the log has one more
// segment.
func (a *partialQueue) nextSegment(filler string) {
	a.t.Helper()
	a.fillSegment(filler)
	a.deleteFillers()
}

// streamPast rolls past the active segment (where the moves put their
// copies) with fillers it deletes, then sends and deletes at least n more:
// a segment dense with copies of moved messages moves again only once as
// many finished records as there are copies follow it.
func (a *partialQueue) streamPast(filler string, n uint64) {
	a.t.Helper()
	a.nextSegment(filler)
	for from := a.q.log.Next(); a.q.log.Next()-from < n; {
		a.nextSegment(filler)
	}
}

// fillSegment sends fillers until the log has one more segment.
func (a *partialQueue) fillSegment(filler string) {
	for segs := a.q.log.Stats().Segments; a.q.log.Stats().Segments == segs; {
		mustSend(a.t, a.q, filler)
	}
}

func (a *partialQueue) deleteFillers() {
	t := a.t
	t.Helper()
	for _, msg := range receiveAll(t, a.q) {
		if x, ok := a.m.msgs[msg.Offset]; ok {
			t.Fatalf("held message %d (%q, kind %d) handed out with the fillers", msg.Offset, x.body, x.kind)
		}
		mustDelete(t, a.q, msg.Offset)
	}
}

// build sends segs segments, each of fillers with perSeg held messages
// among them, receives the plain ones and the groups' fronts, and deletes
// the fillers.
func (a *partialQueue) build(segs, perSeg int) {
	t := a.t
	t.Helper()
	filler := strings.Repeat("f", 512)
	i := 0
	for range segs {
		for k := range perSeg {
			for range 8 {
				mustSend(t, a.q, filler)
			}
			x := &partialMsg{kind: []int{partialPlain, partialPlain, partialNear, partialFar, partialGrouped, partialGrouped, partialGrouped, partialGrouped}[i%8]}
			x.body = fmt.Sprintf("held-%d-kind-%d-%s", i, x.kind, strings.Repeat("x", i%13))
			o := SendOptions{}
			switch x.kind {
			case partialNear:
				o.Delay = partialNearDelay
			case partialFar:
				o.Delay = partialFarDelay
			case partialGrouped:
				x.group = fmt.Sprintf("g%d", (i/8+k)%partialGroups)
				o.Group = x.group
			}
			x.key = mustSendWith(t, a.q, x.body, o)
			a.m.msgs[x.key] = x
			if x.group != "" {
				a.m.groups[x.group] = append(a.m.groups[x.group], x.key)
			}
			i++
		}
		a.fillSegment(filler)
	}
	a.fillSegment(filler)
	// A look that the last sends started must end before the cursor
	// passes the held messages: late, it would move some of them.
	waitKicked(t, a.q)
	want := map[uint64]bool{}
	for k, x := range a.m.msgs {
		if x.kind == partialPlain {
			want[k] = true
		}
	}
	for g := range a.m.groups {
		k, _ := a.m.front(g)
		want[k] = true
	}
	// The fillers are deleted as they come; the held ones stay in flight.
	got := map[uint64]bool{}
	for {
		msg, ok := tryRecv(t, a.q)
		if !ok {
			break
		}
		x, ok := a.m.msgs[msg.Offset]
		if ok && a.raw != nil {
			a.raw[msg.Offset] = msg.Body // not copied: the mapping the queue keeps
		}
		if !ok {
			mustDelete(t, a.q, msg.Offset)
			continue
		}
		if !want[msg.Offset] || got[msg.Offset] || msg.Receives != 1 || string(msg.Body) != x.body {
			t.Fatalf("building: held message %d handed out as %+v", msg.Offset, msg)
		}
		got[msg.Offset] = true
		x.recv = 1
	}
	if len(got) != len(want) {
		t.Fatalf("building: %d held messages handed out, want %d", len(got), len(want))
	}
}

// stor returns the record offset of the message known by key.
func (a *partialQueue) stor(key uint64) uint64 {
	a.q.mu.Lock()
	defer a.q.mu.Unlock()
	i, ok := a.q.es.lookup(key)
	if !ok {
		a.t.Fatalf("no entry for message %d", key)
	}
	return a.q.es.e[i].stor
}

// firstSeries moves every held message once, with no send between the
// moves: their copies gather at the end of the log.
func (a *partialQueue) firstSeries(n int) {
	t := a.t
	t.Helper()
	waitKicked(t, a.q)
	for i := 0; a.q.Stats().Moved < uint64(n); i++ {
		if i > 4000 {
			t.Fatalf("first series: the held messages never all moved: %+v, %d segments", a.q.Stats(), a.q.log.Stats().Segments)
		}
		a.clock.Advance(earlyInterval / 8)
		time.Sleep(100 * time.Microsecond)
	}
	if st := a.q.Stats(); st.Moved != uint64(n) || st.MoveError != nil || st.CheckpointError != nil {
		t.Fatalf("first series: %+v, want Moved %d", st, n)
	}
}

// settle waits until no checkpoint brought forward is pending.
func (a *partialQueue) settle() {
	a.t.Helper()
	waitKicked(a.t, a.q)
	waitFor(a.t, "the early checkpoint", func() bool {
		early, _ := ckFlags(a.q)
		return !early
	})
}

// Six hundred and forty held messages (plain ones in flight, delayed
// near and far, grouped in five groups: fronts in flight, the others
// waiting) are gathered in one segment by a first series of moves, then
// moved out of it again in ten moves. Between those moves: deletes of
// moved and not-yet-moved messages, releases and redeliveries, group
// fronts deleted (their groups split between moved and not-yet-moved
// copies), dead-letterings, the near delays coming due, a crash copy and
// a Close and Open (with Stat and Messages of the closed queue). Every
// message comes back exactly once, with its offset, body, receive count,
// group order and due time, in the queue and in the crash copy; the log
// shrinks to MaxHeldSegments+2 segments; no move or checkpoint fails.
func TestMovedPartialMovesExactlyOnce(t *testing.T) {
	a := &partialQueue{t: t, dir: t.TempDir(), clock: newFakeClock(), m: &partialModel{msgs: map[uint64]*partialMsg{}, groups: map[string][]uint64{}}}
	a.open()
	defer func() { mustCloseQueue(t, a.q) }()
	const segs, perSeg = 80, 8
	const nHeld = segs * perSeg
	a.build(segs, perSeg)
	if st := a.q.Stats(); st.Moved != 0 {
		t.Fatalf("moved before any look: %+v", st)
	}
	a.firstSeries(nHeld)
	firstCopies := a.q.log.Next() - nHeld
	// The stream past the copies' segment brings the first moves of the
	// second series already (looks every 64 sends).
	movedBase := a.q.Stats().Moved
	filler := strings.Repeat("f", 512)
	a.streamPast(filler, nHeld)
	a.settle()
	b0, b1, _ := a.q.log.oldestSegment()
	if firstCopies < b0 || firstCopies >= b1 {
		t.Logf("the first copies from %d start outside the oldest segment [%d, %d)", firstCopies, b0, b1)
	}
	seriesFrom := b1 // the copies of the second series land above the copies' segment
	last := a.q.Stats().Moved
	t.Logf("second series: oldest segment [%d, %d), %d records, log %d segments, next %d", b0, b1, b1-b0, a.q.log.Stats().Segments, seriesFrom)

	var crash *partialModel
	crashDir := t.TempDir()
	crashAt := a.clock.Now()
	moves := 0
	reopened := false
	var movedTotal uint64 // moves of the second series, across the reopen
	var deadBodies []string
	events := func() {
		moves++
		a.settle()
		moved := func(k uint64) bool { return a.stor(k) >= seriesFrom }
		pick := func(kind int, n int, wantMoved bool) []uint64 {
			var out []uint64
			for _, k := range a.m.live() {
				x := a.m.msgs[k]
				if x.kind == kind && moved(k) == wantMoved && len(out) < n {
					out = append(out, k)
				}
			}
			return out
		}
		switch moves {
		case 5:
			// The dead letters come back as new messages, once each.
			n, err := a.q.Redrive(0)
			if err != nil || n != len(deadBodies) {
				t.Fatalf("move 5: Redrive: %d, %v; want %d", n, err, len(deadBodies))
			}
			got := map[string]int{}
			for _, msg := range receiveAll(t, a.q) {
				if _, known := a.m.msgs[msg.Offset]; known || msg.Receives != 1 {
					t.Fatalf("move 5: redriven message handed out as %d (%q), receives %d", msg.Offset, msg.Body, msg.Receives)
				}
				got[string(msg.Body)]++
				mustDelete(t, a.q, msg.Offset)
			}
			for _, b := range deadBodies {
				if got[b] != 1 {
					t.Fatalf("move 5: redriven %q handed out %d times", b, got[b])
				}
			}
		default:
			t.Logf("second series: move %d (%d messages of the series moved)", moves, a.q.Stats().Moved-movedBase)
		case 1:
			// Deletes of moved and not-yet-moved plain messages.
			del := append(pick(partialPlain, 3, true), pick(partialPlain, 3, false)...)
			if len(del) != 6 {
				t.Fatalf("move 1: %d plain messages to delete, want 3 moved and 3 not", len(del))
			}
			if err := a.q.DeleteBatch(del); err != nil {
				t.Fatal(err)
			}
			for _, k := range del {
				a.m.msgs[k].gone = true
			}
			// Releases, redelivered at once.
			rel := append(pick(partialPlain, 3, true), pick(partialPlain, 3, false)...)
			want := map[uint64]bool{}
			for _, k := range rel {
				if err := a.q.Release(k); err != nil {
					t.Fatalf("move 1: Release(%d): %v", k, err)
				}
				want[k] = true
			}
			partialTake(t, a.q, a.m, want, "move 1, released")
			// ChangeVisibility, shorter and longer but below the final advance.
			for _, k := range append(pick(partialPlain, 2, true), pick(partialPlain, 2, false)...) {
				if err := a.q.ChangeVisibility(k, partialVisibility-time.Hour); err != nil {
					t.Fatalf("move 1: ChangeVisibility(%d): %v", k, err)
				}
			}
			// Group fronts deleted: the next of each group comes.
			want = map[uint64]bool{}
			for g := range a.m.groups {
				k, _ := a.m.front(g)
				mustDelete(t, a.q, k)
				a.m.msgs[k].gone = true
				if n, ok := a.m.front(g); ok {
					want[n] = true
				}
			}
			partialTake(t, a.q, a.m, want, "move 1, next fronts")
		case 2:
			// Dead letters: released again and again until MaxReceives.
			dl := append(pick(partialPlain, 2, true), pick(partialPlain, 2, false)...)
			before := a.q.Stats().DeadLettered
			for _, k := range dl {
				x := a.m.msgs[k]
				for x.recv < partialMaxReceives {
					if err := a.q.Release(k); err != nil {
						t.Fatalf("move 2: Release(%d): %v", k, err)
					}
					partialTake(t, a.q, a.m, map[uint64]bool{k: true}, "move 2, redelivery")
				}
				if err := a.q.Release(k); err != nil {
					t.Fatalf("move 2: last Release(%d): %v", k, err)
				}
				x.gone = true
			}
			waitFor(t, "the dead letters", func() bool { return a.q.Stats().DeadLettered == before+uint64(len(dl)) })
			dead := map[uint64]Stored{}
			if err := Messages(a.q.DeadLetter().Dir(), func(s Stored) bool {
				s.Body = slices.Clone(s.Body)
				dead[s.Origin] = s
				return true
			}); err != nil {
				t.Fatal(err)
			}
			for _, k := range dl {
				deadBodies = append(deadBodies, a.m.msgs[k].body)
				s, ok := dead[k]
				if !ok || string(s.Body) != a.m.msgs[k].body || s.Receives != partialMaxReceives {
					t.Fatalf("move 2: dead letter of %d: %v %+v, want body %q receives %d", k, ok, s, a.m.msgs[k].body, partialMaxReceives)
				}
			}
			// The near delays come due.
			a.clock.Advance(partialNearDelay)
			a.m.nearDue = true
			want := map[uint64]bool{}
			for k, x := range a.m.msgs {
				if x.kind == partialNear && !x.gone {
					want[k] = true
				}
			}
			partialTake(t, a.q, a.m, want, "move 2, near delays due")
		case 3:
			// A crash copy: everything synced, no checkpoint or move running.
			a.settle()
			a.q.ck.mu.Lock()
			if err := errors.Join(a.q.log.Sync(), a.q.dels.Sync(), a.q.recvs.Sync()); err != nil {
				a.q.ck.mu.Unlock()
				t.Fatal(err)
			}
			testkit.MustCopyDir(t, a.dir, crashDir, true)
			crash = a.m.clone()
			crashAt = a.clock.Now()
			a.q.ck.mu.Unlock()
		case 4:
			// Close, look at the closed queue, open again.
			movedTotal += a.q.Stats().Moved - movedBase
			mustCloseQueue(t, a.q)
			partialCheckClosed(t, a.dir, a.m, "move 4, closed")
			a.open()
			reopened = true
			last, movedBase = 0, 0
			partialTake(t, a.q, a.m, a.m.readyAfterReset(false), "move 4, after the reopen")
		}
	}
	for i := 0; ; i++ {
		if i > 2000 {
			b0, b1, _ := a.q.log.oldestSegment()
			t.Fatalf("second series: the log stays at %d segments, oldest [%d, %d), after %d moves: %+v",
				a.q.log.Stats().Segments, b0, b1, moves, a.q.Stats())
		}
		a.clock.Advance(earlyInterval / 8)
		time.Sleep(100 * time.Microsecond)
		st := a.q.Stats()
		if st.MoveError != nil || st.CheckpointError != nil {
			t.Fatalf("second series: %+v", st)
		}
		if st.Moved != last {
			if st.Moved-last > MaxMovedPerSegment {
				t.Fatalf("second series: %d messages moved at one checkpoint, more than %d", st.Moved-last, MaxMovedPerSegment)
			}
			t.Logf("second series: move %d: %d messages moved, head %d, log [%d, %d) in %d segments",
				moves+1, st.Moved-last, st.Head, st.Log.First, st.Log.Next, st.Log.Segments)
			events()
			last = a.q.Stats().Moved // moves the events brought are not counted as one
			continue
		}
		if moves >= 4 && a.q.log.Stats().Segments <= 1+2 {
			break
		}
	}
	a.settle()
	movedTotal += a.q.Stats().Moved - movedBase
	if !reopened || crash == nil || moves < 5 {
		t.Fatalf("the series ended after %d moves, before the crash copy and the reopen", moves)
	}
	if want := uint64(len(a.m.live())); movedTotal < want {
		t.Fatalf("second series moved %d messages, fewer than the %d live", movedTotal, want)
	}
	t.Logf("second series: %d moves, %d messages moved, %d live", moves, movedTotal, len(a.m.live()))

	// Everything comes back at its deadline, the far ones at their due time.
	a.clock.Advance(partialVisibility + time.Minute)
	a.m.nearDue = true
	partialDrain(t, a.q, a.m, false, "after the deadlines")
	a.clock.Advance(partialFarDelay)
	partialDrain(t, a.q, a.m, true, "after the far due times")
	if st := a.q.Stats(); st.Messages != 0 || st.MoveError != nil {
		t.Fatalf("at the end: %+v", st)
	}

	// The crash copy: every message it held comes back once.
	cc := NewManualClock(crashAt)
	cq := openEarlyQueue(t, crashDir, cc, partialOptions)
	defer mustCloseQueue(t, cq)
	partialTake(t, cq, crash, crash.readyAfterReset(false), "crash copy, at open")
	cc.Advance(partialVisibility + time.Minute)
	crash.nearDue = true
	partialDrain(t, cq, crash, false, "crash copy, after the deadlines")
	cc.Advance(partialFarDelay)
	partialDrain(t, cq, crash, true, "crash copy, after the far due times")
	if st := cq.Stats(); st.Messages != 0 {
		t.Fatalf("crash copy at the end: %+v", st)
	}
}

// partialCheckClosed checks Stat and Messages of the closed queue in dir
// against the model: each live message listed once, by its offset, with
// its body.
func partialCheckClosed(t *testing.T, dir string, m *partialModel, phase string) {
	t.Helper()
	live := m.live()
	st, err := Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != uint64(len(live)) {
		t.Errorf("%s: Stat says %d messages, %d live (head %d, end %d, deleted %d)", phase, st.Messages, len(live), st.Head, st.End, st.Deleted)
	}
	seen := map[uint64]int{}
	if err := Messages(dir, func(s Stored) bool {
		seen[s.Offset]++
		x, ok := m.msgs[s.Offset]
		switch {
		case s.Err != nil:
			t.Errorf("%s: Messages: %d: %v", phase, s.Offset, s.Err)
		case !ok || x.gone:
			t.Errorf("%s: Messages lists %d (record %d, %q), not live", phase, s.Offset, s.Record, s.Body)
		case string(s.Body) != x.body || s.Group != x.group:
			t.Errorf("%s: Messages lists %d as %q group %q, want %q %q", phase, s.Offset, s.Body, s.Group, x.body, x.group)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range live {
		if seen[k] != 1 {
			t.Errorf("%s: Messages lists live message %d %d times", phase, k, seen[k])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// The second series of moves runs with no checkpoint between its moves,
// and the directory is copied after each one as a process crash leaves it
// (the copies appended, queue.head not written, the segment of the first
// copies still there); deletes of moved and not-yet-moved messages come
// between the moves. Each copy hands every message it holds out once,
// with its body, receive count and group order, and Messages lists each
// once; the queue itself too once the checkpoints run again.
func TestMovedCrashBetweenPartialMoves(t *testing.T) {
	a := &partialQueue{t: t, dir: t.TempDir(), clock: newFakeClock(), m: &partialModel{msgs: map[uint64]*partialMsg{}, groups: map[string][]uint64{}}}
	a.open()
	defer func() { mustCloseQueue(t, a.q) }()
	const segs, perSeg = 40, 8
	a.build(segs, perSeg)
	a.firstSeries(segs * perSeg)
	filler := strings.Repeat("f", 512)
	a.streamPast(filler, segs*perSeg)
	a.settle()

	type crashCopy struct {
		dir string
		m   *partialModel
		at  time.Time
	}
	var copies []crashCopy
	a.q.ck.mu.Lock()
	for k := 0; ; k++ {
		n, err := a.q.moveHeld(false)
		if err != nil {
			a.q.ck.mu.Unlock()
			t.Fatalf("move %d: %v", k, err)
		}
		if n > MaxMovedPerSegment {
			a.q.ck.mu.Unlock()
			t.Fatalf("move %d copied %d messages", k, n)
		}
		if n == 0 {
			if k < 3 {
				a.q.ck.mu.Unlock()
				t.Fatalf("only %d moves without a checkpoint", k)
			}
			break
		}
		// A delete of the lowest and of the highest live plain message.
		var plain []uint64
		for _, key := range a.m.live() {
			if a.m.msgs[key].kind == partialPlain {
				plain = append(plain, key)
			}
		}
		for _, key := range []uint64{plain[0], plain[len(plain)-1]} {
			mustDelete(t, a.q, key)
			a.m.msgs[key].gone = true
		}
		d := t.TempDir()
		testkit.MustCopyDir(t, a.dir, d, true)
		copies = append(copies, crashCopy{d, a.m.clone(), a.clock.Now()})
	}
	a.q.ck.mu.Unlock()
	t.Logf("%d crash copies", len(copies))

	for k, c := range copies {
		phase := fmt.Sprintf("crash copy %d", k)
		// (Stat and Messages of the copy, before an open or after one
		// whose cursor has not passed them, list the originals of the
		// moves since the last checkpoint beside their copies, as they
		// did before partial moves: checked once the cursor passed.)
		cc := NewManualClock(c.at)
		cq := openEarlyQueue(t, c.dir, cc, partialOptions)
		partialTake(t, cq, c.m, c.m.readyAfterReset(false), phase+", at open")
		mustCloseQueue(t, cq)
		partialCheckClosed(t, c.dir, c.m, phase+", opened and closed")
		cq = openEarlyQueue(t, c.dir, cc, partialOptions)
		partialTake(t, cq, c.m, c.m.readyAfterReset(false), phase+", at the second open")
		cc.Advance(partialVisibility + time.Minute)
		c.m.nearDue = true
		partialDrain(t, cq, c.m, false, phase+", after the deadlines")
		cc.Advance(partialFarDelay)
		partialDrain(t, cq, c.m, true, phase+", after the far due times")
		if st := cq.Stats(); st.Messages != 0 {
			t.Fatalf("%s at the end: %+v", phase, st)
		}
		mustCloseQueue(t, cq)
	}

	for i := 0; a.q.log.Stats().Segments > 3; i++ {
		if i > 400 {
			t.Fatalf("the log stays at %d segments: %+v", a.q.log.Stats().Segments, a.q.Stats())
		}
		a.clock.Advance(earlyInterval / 8)
		time.Sleep(100 * time.Microsecond)
	}
	a.clock.Advance(partialVisibility + time.Minute)
	a.m.nearDue = true
	partialDrain(t, a.q, a.m, false, "after the deadlines")
	a.clock.Advance(partialFarDelay)
	partialDrain(t, a.q, a.m, true, "after the far due times")
	if st := a.q.Stats(); st.Messages != 0 || st.MoveError != nil || st.CheckpointError != nil {
		t.Fatalf("at the end: %+v", st)
	}
}

// A real backlog is not moved: a segment with many live messages that were
// never moved (a group of 120 waiting behind its front in flight), alone
// or beside the gathered copies of held messages moved before, stays,
// however many segments follow it and checkpoints come; the copies beside
// it stay with it. Once the backlog is consumed the copies move and the
// log shrinks; every held message comes back once.
func TestMovedRealBacklogNotMoved(t *testing.T) {
	for _, withCopies := range []bool{false, true} {
		t.Run(fmt.Sprintf("copies=%v", withCopies), func(t *testing.T) {
			a := &partialQueue{t: t, dir: t.TempDir(), clock: newFakeClock(), m: &partialModel{msgs: map[uint64]*partialMsg{}, groups: map[string][]uint64{}}}
			a.open()
			defer func() { mustCloseQueue(t, a.q) }()
			filler := strings.Repeat("f", 512)
			nHeld := 0
			if withCopies {
				// Forty plain held messages, moved once: their copies in
				// the active segment.
				for range 10 {
					for range 4 {
						for range 8 {
							mustSend(t, a.q, filler)
						}
						x := &partialMsg{kind: partialPlain, body: fmt.Sprint("held-", nHeld)}
						x.key = mustSend(t, a.q, x.body)
						a.m.msgs[x.key] = x
						nHeld++
					}
					a.fillSegment(filler)
				}
				a.fillSegment(filler)
				for _, msg := range receiveAll(t, a.q) {
					if x, ok := a.m.msgs[msg.Offset]; ok {
						x.recv = 1
						continue
					}
					mustDelete(t, a.q, msg.Offset)
				}
				a.firstSeries(nHeld)
			}
			// The backlog: a group's front in flight, 120 behind it.
			const nBacklog = 121
			base := a.q.log.Next()
			var backlog []uint64
			for i := range nBacklog {
				backlog = append(backlog, mustSendWith(t, a.q, fmt.Sprint("backlog-", i), SendOptions{Group: "bk"}))
			}
			for _, msg := range receiveAll(t, a.q) {
				if msg.Offset != backlog[0] {
					t.Fatalf("handed out %d, want the backlog's front %d", msg.Offset, backlog[0])
				}
			}
			for range 12 {
				a.nextSegment(filler)
				a.clock.Advance(earlyInterval / 8)
			}
			for range 40 {
				a.clock.Advance(earlyInterval / 8)
				time.Sleep(100 * time.Microsecond)
			}
			waitKicked(t, a.q)
			b0, b1, _ := a.q.log.oldestSegment()
			st := a.q.Stats()
			if st.Moved != uint64(nHeld) || b0 > base || b1 <= backlog[nBacklog-1] {
				t.Fatalf("the backlog's segment was moved: Moved %d (want %d), oldest segment [%d, %d), backlog [%d, %d]",
					st.Moved, nHeld, b0, b1, backlog[0], backlog[nBacklog-1])
			}
			if segs := a.q.log.Stats().Segments; segs < 10 {
				t.Fatalf("only %d segments while the backlog holds the head", segs)
			}

			// The backlog is consumed, in order; then the copies move.
			for k, off := range backlog {
				if k > 0 {
					m, ok := tryRecv(t, a.q)
					if !ok || m.Offset != off || string(m.Body) != fmt.Sprint("backlog-", k) {
						t.Fatalf("backlog %d: %v %+v, want offset %d", k, ok, m, off)
					}
				}
				mustDelete(t, a.q, off)
			}
			for i := 0; a.q.log.Stats().Segments > 3; i++ {
				if i > 400 {
					t.Fatalf("the log stays at %d segments after the backlog: %+v", a.q.log.Stats().Segments, a.q.Stats())
				}
				a.clock.Advance(earlyInterval / 8)
				time.Sleep(100 * time.Microsecond)
			}
			if st := a.q.Stats(); st.MoveError != nil || st.CheckpointError != nil || withCopies && st.Moved < uint64(2*nHeld) {
				t.Fatalf("after the backlog: %+v", st)
			}
			a.clock.Advance(partialVisibility + time.Minute)
			partialDrain(t, a.q, a.m, true, "after the deadlines")
			if st := a.q.Stats(); st.Messages != 0 {
				t.Fatalf("at the end: %+v", st)
			}
		})
	}
}

// The bodies of messages in flight, handed out before their segments went
// (first hand-outs before the first series of moves, second hand-outs
// between the partial moves of the second), stay what they were until
// their deadlines while both series drop and recycle the segments they
// point into.
func TestMovedBodiesThroughPartialMoves(t *testing.T) {
	a := &partialQueue{t: t, dir: t.TempDir(), clock: newFakeClock(), m: &partialModel{msgs: map[uint64]*partialMsg{}, groups: map[string][]uint64{}}, raw: map[uint64][]byte{}}
	a.open()
	defer func() { mustCloseQueue(t, a.q) }()
	const segs, perSeg = 40, 8
	a.build(segs, perSeg)
	a.firstSeries(segs * perSeg)
	check := func(phase string) {
		t.Helper()
		for k, b := range a.raw {
			if x := a.m.msgs[k]; !x.gone && string(b) != x.body {
				t.Fatalf("%s: the body of message %d in flight reads %q, want %q", phase, k, b, x.body)
			}
		}
	}
	check("after the first series")
	filler := strings.Repeat("f", 512)
	a.nextSegment(filler)
	a.nextSegment(filler)
	moves := 0
	last := a.q.Stats().Moved
	for i := 0; a.q.log.Stats().Segments > 3 || moves < 3; i++ {
		if i > 2000 {
			t.Fatalf("the log stays at %d segments: %+v", a.q.log.Stats().Segments, a.q.Stats())
		}
		a.clock.Advance(earlyInterval / 8)
		time.Sleep(100 * time.Microsecond)
		if st := a.q.Stats(); st.Moved != last {
			last = st.Moved
			moves++
			a.settle()
			check(fmt.Sprintf("move %d", moves))
			// Second hand-outs of a few plain messages, moved or not.
			var plain []uint64
			for _, k := range a.m.live() {
				if a.m.msgs[k].kind == partialPlain {
					plain = append(plain, k)
				}
			}
			for _, k := range []uint64{plain[moves%len(plain)], plain[len(plain)-1-moves%len(plain)]} {
				if err := a.q.Release(k); err != nil {
					t.Fatal(err)
				}
				m, ok := tryRecv(t, a.q)
				if !ok || m.Offset != k {
					t.Fatalf("move %d: after Release(%d): %v %+v", moves, k, ok, m)
				}
				a.m.msgs[k].recv++
				a.raw[k] = m.Body
			}
		}
		// Filler traffic: segments are dropped and recycled.
		if i%4 == 0 {
			mustSend(t, a.q, filler)
			a.deleteFillers()
		}
	}
	a.settle()
	check("after the second series")
	for range 4 {
		a.nextSegment(filler)
		a.clock.Advance(earlyInterval / 8)
	}
	a.settle()
	check("after more traffic")
}
