package queue

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// Messages and Stat beside moves of held messages: crash
// copies of a queue directory taken between the moves and checkpoints of
// many rounds (several copies of one message, originals below the head,
// deletes naming an older copy or the original, damaged records), and
// Messages and Stat running beside an owner that moves, checkpoints and
// deletes.

// browseMsg is a held message of the model.
type browseMsg struct {
	body  string
	group string
	due   time.Time // zero when none
}

// browseHeld is a queue of held messages: plain ones in flight, delayed ones,
// groups whose front is in flight and whose second waits.
type browseHeld struct {
	t      *testing.T
	dir    string
	clock  *fakeClock
	q      *Queue
	live   map[uint64]*browseMsg
	filler string
}

func newBrowseHeld(t *testing.T, n int) *browseHeld {
	b := &browseHeld{t: t, dir: t.TempDir(), clock: newFakeClock(), live: map[uint64]*browseMsg{}, filler: strings.Repeat("f", 200)}
	b.q = openHeldQueue(t, b.dir, b.clock)
	for i := range n {
		x := &browseMsg{body: fmt.Sprintf("held-%03d-%s", i, strings.Repeat("h", 10+i%17))}
		o := SendOptions{}
		switch i % 4 {
		case 1:
			o.Delay = 100 * time.Hour
			x.due = time.UnixMilli(b.clock.Now().Add(o.Delay).UnixMilli())
		case 2, 3:
			x.group = fmt.Sprintf("g%d", i/4)
			o.Group = x.group
		}
		b.live[mustSendWith(t, b.q, x.body, o)] = x
		b.next()
	}
	b.next()
	return b
}

// next sends fillers until the log has one more segment, receives what is
// ready and deletes the fillers; held messages handed out stay in flight.
func (b *browseHeld) next() {
	b.t.Helper()
	sendToNextSegment(b.t, b.q, b.filler)
	for _, m := range receiveAll(b.t, b.q) {
		if b.live[m.Offset] == nil {
			mustDelete(b.t, b.q, m.Offset)
		}
	}
}

func (b *browseHeld) stor(key uint64) uint64 {
	b.q.mu.Lock()
	defer b.q.mu.Unlock()
	i, ok := b.q.es.lookup(key)
	if !ok {
		return key
	}
	return b.q.es.e[i].stor
}

// browseCopy is a crash copy and what it holds.
type browseCopy struct {
	name string
	dir  string
	live map[uint64]*browseMsg
	at   time.Time
}

// snap copies the directory (with q.ck.mu held by the caller: no move or
// checkpoint runs).
func (b *browseHeld) snap(name string) browseCopy {
	b.t.Helper()
	d := filepath.Join(b.t.TempDir(), "q")
	if err := os.Mkdir(d, 0o700); err != nil {
		b.t.Fatal(err)
	}
	testkit.MustCopyDir(b.t, b.dir, d, true)
	return browseCopy{name: name, dir: d, live: maps.Clone(b.live), at: b.clock.Now()}
}

// browseList returns what Messages gives for dir, bodies copied.
func browseList(t *testing.T, dir string) []Stored {
	t.Helper()
	var got []Stored
	if err := Messages(dir, func(m Stored) bool {
		m.Body = bytes.Clone(m.Body)
		got = append(got, m)
		return true
	}); err != nil {
		t.Fatalf("Messages(%s): %v", dir, err)
	}
	return got
}

// browseHanded is a message a fresh Open hands out.
type browseHanded struct {
	body     string
	group    string
	receives int
	err      error
}

// browseOpenDrain opens dir (a closed queue) at time at and receives
// everything, deleting each message, with the clock advanced past every
// delay and deadline; it fails on an offset handed out twice.
func browseOpenDrain(t *testing.T, dir string, at time.Time, mod ...func(*Options)) map[uint64]browseHanded {
	t.Helper()
	clock := NewManualClock(at)
	q := openEarlyQueue(t, dir, clock, append([]func(*Options){func(o *Options) {
		o.Visibility = 10 * time.Hour
		o.MaxHeldSegments = 1
	}}, mod...)...)
	defer mustCloseQueue(t, q)
	got := map[uint64]browseHanded{}
	for idle := 0; idle < 3; {
		m, ok, err := q.TryReceive()
		if !ok {
			if err != nil {
				t.Fatalf("%s: TryReceive: %v", dir, err)
			}
			if q.Stats().Messages == 0 {
				break
			}
			clock.Advance(200 * time.Hour)
			time.Sleep(time.Millisecond)
			idle++
			continue
		}
		idle = 0
		if _, dup := got[m.Offset]; dup {
			t.Fatalf("%s: a fresh Open hands %d out twice", dir, m.Offset)
		}
		got[m.Offset] = browseHanded{body: string(m.Body), group: m.Group, receives: m.Receives, err: err}
		mustDelete(t, q, m.Offset)
	}
	if n := q.Stats().Messages; n != 0 {
		t.Fatalf("%s: %d messages never handed out", dir, n)
	}
	return got
}

// browseOrdered checks that ms are in strictly ascending order of Offset.
func browseOrdered(t *testing.T, phase string, ms []Stored) {
	t.Helper()
	for i := 1; i < len(ms); i++ {
		if ms[i].Offset <= ms[i-1].Offset {
			t.Errorf("%s: Messages gave %d (record %d) after %d (record %d)", phase, ms[i].Offset, ms[i].Record, ms[i-1].Offset, ms[i-1].Record)
		}
	}
}

// check compares Messages and Stat of an undamaged crash copy with the
// model and with what a fresh Open of it hands out.
func (c browseCopy) check(t *testing.T) {
	t.Helper()
	got := browseList(t, c.dir)
	browseOrdered(t, c.name, got)
	st, err := Stat(c.dir)
	if err != nil {
		t.Fatalf("%s: Stat: %v", c.name, err)
	}
	if st.Messages != uint64(len(got)) {
		defer t.Errorf("%s: Stat.Messages %d, Messages gave %d", c.name, st.Messages, len(got))
	}
	seen := map[uint64]Stored{}
	for _, m := range got {
		x := c.live[m.Offset]
		switch {
		case m.Err != nil:
			t.Errorf("%s: Messages: %d (record %d): %v", c.name, m.Offset, m.Record, m.Err)
		case x == nil:
			t.Errorf("%s: Messages gave %d (record %d, %q), not live", c.name, m.Offset, m.Record, m.Body)
		case string(m.Body) != x.body || m.Group != x.group || !m.Due.Equal(x.due):
			t.Errorf("%s: Messages gave %d as %q group %q due %v, want %q %q %v", c.name, m.Offset, m.Body, m.Group, m.Due, x.body, x.group, x.due)
		}
		seen[m.Offset] = m
	}
	for k := range c.live {
		if _, ok := seen[k]; !ok {
			t.Errorf("%s: Messages left live message %d out", c.name, k)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	d := filepath.Join(t.TempDir(), "q")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	testkit.MustCopyDir(t, c.dir, d, true)
	handed := browseOpenDrain(t, d, c.at)
	if len(handed) != len(got) {
		t.Errorf("%s: a fresh Open hands out %d messages, Messages gives %d", c.name, len(handed), len(got))
	}
	for k, h := range handed {
		m, ok := seen[k]
		switch {
		case !ok:
			t.Errorf("%s: a fresh Open hands out %d (%q), Messages does not give it", c.name, k, h.body)
		case h.err != nil || h.body != string(m.Body) || h.group != m.Group:
			t.Errorf("%s: %d: Open hands out %q group %q (%v), Messages %q group %q", c.name, k, h.body, h.group, h.err, m.Body, m.Group)
		case m.Record != m.Offset && m.Receives != h.receives-1:
			t.Errorf("%s: moved message %d: Messages says %d receives, Open hands it out with %d", c.name, k, m.Receives, h.receives)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// browseRounds runs rounds of moves and checkpoints, deleting a held message
// now and then, and copies the directory after each move, before each
// checkpoint, in the middle of one (queue.head written, the segments not
// dropped yet) and after it.
func browseRounds(t *testing.T, b *browseHeld, rounds int) []browseCopy {
	var copies []browseCopy
	for r := range rounds {
		b.next()
		b.next()
		if r%3 == 2 {
			keys := slices.Sorted(maps.Keys(b.live))
			var plain []uint64
			for _, k := range keys {
				if x := b.live[k]; x.group == "" && x.due.IsZero() {
					plain = append(plain, k) // in flight
				}
			}
			if len(plain) > 2 {
				for _, k := range []uint64{plain[0], plain[len(plain)/2]} {
					mustDelete(t, b.q, k)
					delete(b.live, k)
				}
			}
		}
		waitKicked(t, b.q)
		b.q.ck.mu.Lock()
		for k := 0; ; k++ {
			n, err := b.q.moveHeld(false)
			if err != nil {
				b.q.ck.mu.Unlock()
				t.Fatalf("round %d move %d: %v", r, k, err)
			}
			if n == 0 {
				break
			}
			copies = append(copies, b.snap(fmt.Sprintf("round %d, after move %d", r, k)))
		}
		pre := b.snap(fmt.Sprintf("round %d, before the checkpoint", r))
		copies = append(copies, pre)
		b.q.mu.Lock()
		moved := b.q.mv.moved
		b.q.mu.Unlock()
		if err := b.q.checkpoint(); err != nil {
			b.q.ck.mu.Unlock()
			t.Fatalf("round %d: checkpoint: %v", r, err)
		}
		b.q.mu.Lock()
		same := b.q.mv.moved == moved
		b.q.mu.Unlock()
		if same {
			// A crash between queue.head's replacement and the drops.
			mid := b.snap(fmt.Sprintf("round %d, in the middle of the checkpoint", r))
			if err := os.RemoveAll(mid.dir); err != nil {
				b.q.ck.mu.Unlock()
				t.Fatal(err)
			}
			if err := os.Mkdir(mid.dir, 0o700); err != nil {
				b.q.ck.mu.Unlock()
				t.Fatal(err)
			}
			testkit.MustCopyDir(t, pre.dir, mid.dir, true)
			if err := testkit.CopyFile(filepath.Join(b.dir, headName), filepath.Join(mid.dir, headName)); err != nil {
				b.q.ck.mu.Unlock()
				t.Fatal(err)
			}
			copies = append(copies, mid)
		}
		copies = append(copies, b.snap(fmt.Sprintf("round %d, after the checkpoint", r)))
		b.q.ck.mu.Unlock()
	}
	return copies
}

// Crash copies taken at many points of a series of moves and checkpoints:
// Messages gives every live message once, in offset order, with its body,
// group, due time and receive count; Stat counts as many; a fresh Open
// hands out the same messages.
func TestBrowseCrashCopiesBetweenMoves(t *testing.T) {
	b := newBrowseHeld(t, 12)
	defer func() { mustCloseQueue(t, b.q) }()
	copies := browseRounds(t, b, 12)
	moved := 0
	for k := range b.live {
		if b.stor(k) != k {
			moved++
		}
	}
	t.Logf("%d crash copies, %d moves, %d of %d live messages moved", len(copies), b.q.Stats().Moved, moved, len(b.live))
	if b.q.Stats().Moved < 10 {
		t.Fatalf("only %d moves", b.q.Stats().Moved)
	}
	several, originals := 0, 0
	for _, c := range copies {
		st, err := Stat(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		for x, recs := range browseReadLog(t, c.dir) {
			if len(recs) > 1 {
				several++
			}
			if x >= st.Head && x >= st.First {
				originals++
			}
		}
		c.check(t)
	}
	t.Logf("messages with several copies in a crash copy: %d; with the original beside: %d", several, originals)
	if several == 0 || originals == 0 {
		t.Fatal("no crash copy holds several copies of a message, or an original beside its copy")
	}
}

// browseRecords returns where body occurs in the segment files of dir (file,
// position), oldest segment first.
func browseRecords(t *testing.T, dir, body string) [][2]any {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	var at [][2]any
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; ; {
			j := bytes.Index(data[i:], []byte(body))
			if j < 0 {
				break
			}
			at = append(at, [2]any{name, i + j})
			i += j + 1
		}
	}
	return at
}

func browseFlip(t *testing.T, name string, pos int) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(pos)); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b[:], int64(pos)); err != nil {
		t.Fatal(err)
	}
}

// Damaged records in crash copies (a byte of the body of an original, of
// an older copy, of the newest copy): Messages never panics, never gives
// an offset twice, Stat counts what it gives, and a fresh Open hands out
// the same offsets; a live message whose good record remains comes with
// its body.
func TestBrowseDamagedCopiesNeverTwice(t *testing.T) {
	b := newBrowseHeld(t, 12)
	defer func() { mustCloseQueue(t, b.q) }()
	copies := browseRounds(t, b, 6)
	checked := 0
	for ci, c := range copies {
		if ci%2 == 1 {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(c.live)) {
			x := c.live[k]
			at := browseRecords(t, c.dir, x.body)
			if len(at) < 2 {
				continue // only messages with an original or copy beside
			}
			for which, p := range at {
				phase := fmt.Sprintf("%s, record %d of %d of message %d damaged", c.name, which+1, len(at), k)
				d := filepath.Join(t.TempDir(), "q")
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
				testkit.MustCopyDir(t, c.dir, d, true)
				name := filepath.Join(d, filepath.Base(p[0].(string)))
				browseFlip(t, name, p[1].(int)+len(x.body)/2)
				browseCheckDamaged(t, phase, d, c, k)
				checked++
			}
			break
		}
	}
	t.Logf("%d damaged copies", checked)
	if checked < 5 {
		t.Fatalf("only %d damaged copies", checked)
	}
}

func browseCheckDamaged(t *testing.T, phase, d string, c browseCopy, damaged uint64) {
	t.Helper()
	var got []Stored
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: Messages panics: %v", phase, r)
			}
		}()
		got = browseList(t, d)
	}()
	browseOrdered(t, phase, got)
	st, err := Stat(d)
	if err != nil {
		t.Fatalf("%s: Stat: %v", phase, err)
	}
	if st.Messages != uint64(len(got)) {
		t.Errorf("%s: Stat.Messages %d, Messages gave %d", phase, st.Messages, len(got))
	}
	seen := map[uint64]Stored{}
	for _, m := range got {
		if _, dup := seen[m.Offset]; dup {
			t.Errorf("%s: Messages gave %d twice", phase, m.Offset)
		}
		seen[m.Offset] = m
		if x := c.live[m.Offset]; x != nil && m.Err == nil && string(m.Body) != x.body {
			t.Errorf("%s: Messages gave %d as %q, want %q", phase, m.Offset, m.Body, x.body)
		}
		if x := c.live[m.Offset]; x == nil && m.Err == nil {
			t.Errorf("%s: Messages gave %d (record %d, %q), not live", phase, m.Offset, m.Record, m.Body)
		}
	}
	for k := range c.live {
		if _, ok := seen[k]; !ok && k != damaged {
			t.Errorf("%s: Messages left undamaged live message %d out", phase, k)
		}
	}
	handed := browseOpenDrain(t, d, c.at)
	for k, h := range handed {
		m, ok := seen[k]
		switch {
		case !ok:
			t.Errorf("%s: a fresh Open hands out %d (%q, %v), Messages does not give it", phase, k, h.body, h.err)
		case (h.err != nil) != (m.Err != nil):
			t.Errorf("%s: %d: Open hands it out with error %v, Messages with %v", phase, k, h.err, m.Err)
		case h.err == nil && h.body != string(m.Body):
			t.Errorf("%s: %d: Open hands out %q, Messages gives %q", phase, k, h.body, m.Body)
		}
	}
	for k, m := range seen {
		if _, ok := handed[k]; !ok {
			t.Errorf("%s: Messages gives %d (record %d, err %v), a fresh Open does not hand it out", phase, k, m.Record, m.Err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// browseReadLog returns the copies' records in the message log of dir, by the
// offset their message is known by.
func browseReadLog(t *testing.T, dir string) map[uint64][]uint64 {
	t.Helper()
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return movedCopies(l, l.First())
}

// Messages and Stat in loops beside an owner that moves, checkpoints and
// deletes: no panic, no error, no offset twice, ascending order, every
// message live before and after a call given by it with its body, unless
// the call ran beside a move of it (counted and reported).
func TestBrowseBesideMovingOwner(t *testing.T) { browseBesideOwner(t, 0) }

// The same with a reader that takes a while over each message (a
// snapshot writing to a slow sink): moves and drops run within one call.
func TestBrowseBesideMovingOwnerSlowReader(t *testing.T) { browseBesideOwner(t, 300*time.Microsecond) }

func browseBesideOwner(t *testing.T, slow time.Duration) {
	b := newBrowseHeld(t, 24)
	defer func() { mustCloseQueue(t, b.q) }()
	// Messages that stay live throughout, and their bodies.
	stable := map[uint64]string{}
	for k, x := range b.live {
		stable[k] = x.body
	}
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []string
		calls    atomic.Int64
		besides  atomic.Int64
		missed   = map[string]int{}
	)
	report := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 20 {
			problems = append(problems, s)
		}
	}
	stors := func() map[uint64]uint64 {
		s := map[uint64]uint64{}
		for k := range stable {
			s[k] = b.stor(k)
		}
		return s
	}
	var storMu sync.Mutex
	current := stors()
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					report(fmt.Sprintf("reader %d panics: %v", w, r))
				}
			}()
			for !stop.Load() {
				storMu.Lock()
				before := maps.Clone(current)
				stable := maps.Clone(stable)
				storMu.Unlock()
				movedBefore, firstBefore := b.q.Stats().Moved, b.q.log.First()
				var got []Stored
				err := Messages(b.dir, func(m Stored) bool {
					m.Body = bytes.Clone(m.Body)
					got = append(got, m)
					time.Sleep(slow)
					return true
				})
				movedAfter, firstAfter := b.q.Stats().Moved, b.q.log.First()
				storMu.Lock()
				after := maps.Clone(current)
				storMu.Unlock()
				calls.Add(1)
				if movedAfter != movedBefore {
					besides.Add(1)
				}
				if err != nil {
					report(fmt.Sprintf("Messages: %v", err))
					continue
				}
				seen := map[uint64]Stored{}
				for i, m := range got {
					// A message moved out of a segment dropped during the
					// call comes at its copy's place (Messages' doc),
					// whether it was moved during the call or before.
					atCopy := m.Record != m.Offset && (movedAfter != movedBefore || firstAfter != firstBefore)
					if i > 0 && m.Offset <= got[i-1].Offset && !atCopy {
						report(fmt.Sprintf("Messages gave %d (record %d) after %d (record %d)", m.Offset, m.Record, got[i-1].Offset, got[i-1].Record))
					}
					if _, dup := seen[m.Offset]; dup {
						report(fmt.Sprintf("Messages gave %d twice", m.Offset))
					}
					seen[m.Offset] = m
				}
				for k, body := range stable {
					m, ok := seen[k]
					kind := "not moved during the call"
					if before[k] != after[k] || movedAfter != movedBefore {
						switch {
						case before[k] == k:
							kind = "moved for the first time during the call"
						case before[k] != after[k]:
							kind = "moved again during the call"
						default:
							kind = "not moved itself, beside other moves"
						}
					}
					switch {
					case !ok:
						mu.Lock()
						missed["missed, "+kind]++
						mu.Unlock()
						if !strings.HasPrefix(kind, "moved again") {
							report(fmt.Sprintf("Messages left out %d, live throughout, %s (record %d before, %d after)", k, kind, before[k], after[k]))
						}
					case m.Err != nil:
						mu.Lock()
						missed["error, "+kind]++
						mu.Unlock()
						if !strings.HasPrefix(kind, "moved again") && (slow == 0 || !strings.HasPrefix(kind, "moved")) {
							report(fmt.Sprintf("Messages gave %d, live throughout, %s (record %d before, %d after), with %v", k, kind, before[k], after[k], m.Err))
						}
					case string(m.Body) != body:
						report(fmt.Sprintf("Messages gave %d as %q, want %q", k, m.Body, body))
					}
				}
				if st, err := Stat(b.dir); err != nil {
					report(fmt.Sprintf("Stat: %v", err))
				} else if st.Messages < uint64(len(stable)) {
					report(fmt.Sprintf("Stat says %d messages, %d live throughout", st.Messages, len(stable)))
				}
			}
		}()
	}
	// 6 s, and on a loaded machine on until 20 Messages calls (60 s at most).
	start := time.Now()
	for r := 0; r < 10 || time.Since(start) < 6*time.Second || calls.Load() < 20 && time.Since(start) < time.Minute; r++ {
		// A new held message each round: first moves all along.
		if r%10 == 0 && len(stable) < 150 {
			body := fmt.Sprintf("new-held-%d", r)
			k := mustSend(t, b.q, body)
			b.live[k] = &browseMsg{body: body}
			storMu.Lock()
			stable[k] = body
			storMu.Unlock()
		}
		b.next()
		storMu.Lock()
		current = stors()
		storMu.Unlock()
		b.q.ck.mu.Lock()
		for {
			n, err := b.q.moveHeld(false)
			storMu.Lock()
			current = stors()
			storMu.Unlock()
			if err != nil {
				report(fmt.Sprintf("move: %v", err))
			}
			if n == 0 {
				break
			}
		}
		if err := b.q.checkpoint(); err != nil {
			report(fmt.Sprintf("checkpoint: %v", err))
		}
		b.q.ck.mu.Unlock()
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d Messages calls, %d beside moves, %d moves; %v", calls.Load(), besides.Load(), b.q.Stats().Moved, missed)
	for _, p := range problems {
		t.Error(p)
	}
	// Under a full parallel test run the slow reader made 8 calls in the
	// minute (the owner's loop 40,000 moves): enough to have read beside
	// moves, which is what counts.
	if calls.Load() < 5 || besides.Load() < 3 || b.q.Stats().Moved < 20 {
		t.Fatalf("%d calls, %d moves", calls.Load(), b.q.Stats().Moved)
	}
}
