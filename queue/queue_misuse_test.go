package queue

// The queue keeps the promises of README.md ("The work queue",
// "Recovery") against misuse: each test uses the queue the way a careless
// user, a crash or a damaged disk would, and fails when the promise it
// names breaks.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/testkit"
)

// ---------------------------------------------------------------------------
// helpers

// hGot is one hand-out seen by a test of this file: the body is copied at once.
type hGot struct {
	off      uint64
	body     string
	receives int
	deadline time.Time
	err      error
}

// hDrain hands out every ready message (TryReceive) and copies each body.
// A hand-out with an error (a damaged record) is kept with its error.
func hDrain(t testing.TB, q *Queue) []hGot {
	t.Helper()
	var got []hGot
	for i := 0; ; i++ {
		if i > 5_000_000 {
			t.Fatalf("hDrain: more than 5M hand-outs")
		}
		m, ok, err := q.TryReceive()
		if !ok {
			if err != nil {
				t.Fatalf("TryReceive: %v", err)
			}
			return got
		}
		got = append(got, hGot{off: m.Offset, body: string(m.Body), receives: m.Receives, deadline: m.Deadline, err: err})
	}
}

func hOffsets(g []hGot) []uint64 {
	offs := make([]uint64, len(g))
	for i, x := range g {
		offs[i] = x.off
	}
	return offs
}

// hBody is the body of message i of a test of this file: its number, then
// filler of a length that varies with i.
func hBody(i int) string {
	return fmt.Sprintf("hb-%05d-%s", i, strings.Repeat(string(rune('a'+i%26)), 20+i%37))
}

// hSet is a set of offsets.
type hSet map[uint64]bool

func (s hSet) sorted() []uint64 {
	out := make([]uint64, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// hRecInfo is where one record lies.
type hRecInfo struct {
	seg      string
	pos, len int64
	body     []byte // only for the delete log
}

// hInspect lists the records of the log in dir (read-only) with their
// place on disk; with bodies, it reads each good record's body too.
func hInspect(t testing.TB, dir string, bodies bool) map[uint64]hRecInfo {
	t.Helper()
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly(%s): %v", dir, err)
	}
	defer l.Close()
	out := map[uint64]hRecInfo{}
	for ri := range l.Inspect(l.First()) {
		if ri.Missing != 0 || !ri.OK {
			t.Fatalf("template log %s already damaged at %d: %+v", dir, ri.Offset, ri)
		}
		info := hRecInfo{seg: ri.Segment, pos: ri.Position, len: ri.Size}
		if bodies {
			r, err := l.Read(ri.Offset)
			if err != nil {
				t.Fatal(err)
			}
			info.body = bytes.Clone(r.Body)
			r.Release()
		}
		out[ri.Offset] = info
	}
	return out
}

// hSegments returns the .log file names in dir, sorted.
func hSegments(t testing.TB, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var names []string
	for _, p := range m {
		names = append(names, filepath.Base(p))
	}
	sort.Strings(names)
	return names
}

// hNamed returns the message offsets a delete record names.
func hNamed(body []byte) []uint64 {
	switch len(body) {
	case 8:
		return []uint64{binary.BigEndian.Uint64(body)}
	case 16:
		var out []uint64
		for o := binary.BigEndian.Uint64(body); o < binary.BigEndian.Uint64(body[8:]); o++ {
			out = append(out, o)
		}
		return out
	}
	return nil
}

func hRewrite(t testing.TB, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------------------
// Promise 1 / README "offsets after a power failure": the lost messages are
// counted in Recovery().Lost and deleted with one range record, whichever
// checkpoint (queue.head, log.clean, log.recovery) knew the higher end.

// TestQueueLostTailCountedNotDamaged: a SyncNone queue is closed cleanly
// (queue.head and log.clean both say end 10, both fsynced), then the power
// fails before the page cache wrote the segment's tail: the segment holds
// messages 0..2 only. The README promises the lost messages 3..9 are
// counted in Recovery().Lost and deleted with one range record; they must
// not be handed out as damaged records to every receiver.
func TestQueueLostTailCountedNotDamaged(t *testing.T) {
	for _, how := range []string{"tail zeroed", "segment removed"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			q := openTestQueue(t, dir, clock)
			for i := range 10 {
				mustSend(t, q, fmt.Sprint("body ", i))
			}
			mustCloseQueue(t, q)
			recs := hInspect(t, dir, false)
			seg := filepath.Join(dir, recs[3].seg)
			keep := 3
			if how == "tail zeroed" {
				hRewrite(t, seg, func(b []byte) []byte {
					clear(b[recs[3].pos:])
					return b
				})
			} else {
				keep = 0
				for _, suffix := range []string{".log", ".index", ".timeindex"} {
					os.Remove(strings.TrimSuffix(seg, ".log") + suffix)
				}
			}
			q = openTestQueue(t, dir, clock)
			defer mustCloseQueue(t, q)
			rec := q.Recovery()
			got := hDrain(t, q)
			var want []uint64
			for i := range keep {
				want = append(want, uint64(i))
			}
			var bad []string
			for _, g := range got {
				if g.err != nil {
					bad = append(bad, fmt.Sprintf("%d (%v)", g.off, g.err))
				}
			}
			if rec.Lost != uint64(10-keep) || !slices.Equal(hOffsets(got), want) {
				t.Errorf("after losing messages %d..9 (log.clean and queue.head know end 10):\n"+
					"  Recovery().Lost = %d, want %d\n  handed out %v, want %v\n  damaged hand-outs: %v\n  log notes: %q",
					keep, rec.Lost, 10-keep, hOffsets(got), want, bad, rec.Log.Notes)
			}
			if off := mustSend(t, q, "new"); off < 10 {
				t.Errorf("a new message took offset %d, given out before the power failure", off)
			}
		})
	}
}

// TestQueuePowerLossRandomWorkloads runs random workloads on a queue whose
// syncs a simulated disk watches (syncDisk). At a random moment everything
// the queue wrote is written back to the disk (as a system would, at any
// moment); from then on only what the queue really syncs reaches it: a
// file's content at its fdatasync, a directory's entries at its sync
// (queue.head at each checkpoint, the delete log that writeHead syncs first
// under SyncInterval, the segments the checkpoint drops). Then the power
// fails and the disk, exactly as the syncs left it, is opened:
//
//   - no new message takes an offset below the last durable checkpoint's
//     end (nor below the end the disk's log knew);
//   - no message deleted below the durable head, or whose delete record was
//     durable, is handed out;
//   - every message on the disk that was never deleted comes back, once,
//     with its body;
//   - a second open after that finds nothing more lost, and hands out the
//     same messages.
func TestQueuePowerLossRandomWorkloads(t *testing.T) {
	old := deleteSegmentBytes
	deleteSegmentBytes = 24 * 16
	t.Cleanup(func() { deleteSegmentBytes = old })
	for _, policy := range []engine.SyncPolicy{engine.SyncNone, engine.SyncInterval} {
		for seed := range 4 {
			t.Run(fmt.Sprintf("%v/seed=%d", policy, seed), func(t *testing.T) {
				hPowerLossRun(t, uint64(seed), policy)
			})
		}
	}
}

func hPowerLossRun(t *testing.T, seed uint64, policy engine.SyncPolicy) {
	rng := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()
	sd := newSyncDisk(t, dir)
	clock := newFakeClock()
	opts := func(o *Options) {
		o.Log.SegmentBytes = 2048
		o.Log.Sync = policy
		o.Log.SyncInterval = time.Hour
		o.CheckpointInterval = time.Second
		o.Visibility = 5 * time.Second
	}
	q := openTestQueue(t, dir, clock, opts)
	bodies := map[uint64]string{}
	deleted := hSet{} // every acknowledged delete
	// What the disk holds: the deletes (in order) and sends (a count)
	// acknowledged before the write-back or before a sync of their log.
	var delOrder []uint64
	var nDeleted, nSent, durableDels, durableSent atomic.Int64
	snapped := false
	sd.onSync = func(path string, isDir bool) {
		switch {
		case isDir || !snapped:
		case filepath.Dir(path) == filepath.Join(dir, deletesDir):
			durableDels.Store(nDeleted.Load())
		case filepath.Dir(path) == dir && filepath.Base(path) == newestSegment(dir):
			// The active segment (a sealed one's sync says nothing of it).
			durableSent.Store(nSent.Load())
		}
	}
	del := func(off uint64) {
		deleted[off] = true
		delOrder = append(delOrder, off)
		nDeleted.Store(int64(len(delOrder)))
	}
	var handed []uint64 // in flight or ready, not deleted
	steps := 200 + rng.IntN(200)
	snapAt := steps/4 + rng.IntN(steps/2)
	for step := range steps {
		if step == snapAt {
			sd.writeback()
			durableDels.Store(nDeleted.Load())
			durableSent.Store(nSent.Load())
			snapped = true
		}
		switch p := rng.IntN(100); {
		case p < 45:
			i := len(bodies)
			off := mustSend(t, q, hBody(i))
			bodies[off] = hBody(i)
			nSent.Store(int64(off + 1))
		case p < 65:
			if m, ok := tryRecv(t, q); ok {
				handed = append(handed, m.Offset)
			}
		case p < 80:
			if len(handed) > 0 {
				k := rng.IntN(len(handed))
				off := handed[k]
				handed = slices.Delete(handed, k, k+1)
				mustDelete(t, q, off)
				del(off)
			}
		case p < 82:
			if n := q.log.Next(); n > 0 {
				off := uint64(rng.IntN(int(n)))
				if err := q.Discard(off); err != nil {
					t.Fatalf("Discard(%d): %v", off, err)
				}
				del(off)
				handed = slices.DeleteFunc(handed, func(x uint64) bool { return x == off })
			}
		default:
			clock.Advance(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
		}
	}
	sd.crash()
	disk := t.TempDir()
	var st syncDiskStats
	sd.build(t, nil, disk, &st)
	snapNext := uint64(durableSent.Load())
	durableDel := hSet{} // deletes the disk holds
	for _, off := range delOrder[:durableDels.Load()] {
		durableDel[off] = true
	}
	if files, dirs := sd.syncs(dir); dirs == 0 || files == 0 {
		t.Errorf("the simulated disk saw %d file and %d directory syncs of the queue's directory: queue.head was never written", files, dirs)
	}
	mustCloseQueue(t, q)

	hd, err := readHead(disk)
	if err != nil {
		t.Fatalf("the disk's queue.head: %v", err)
	}
	q = openTestQueue(t, disk, clock, opts)
	rec := q.Recovery()
	reported := policy == engine.SyncNone && len(rec.DeleteDamage) > 0
	got := hDrain(t, q)
	seen := hSet{}
	for _, g := range got {
		if seen[g.off] {
			t.Errorf("offset %d handed out twice right after open", g.off)
		}
		seen[g.off] = true
		switch {
		case g.err != nil:
			t.Errorf("offset %d handed out as damaged: %v", g.off, g.err)
		case reported && (g.off < hd.head || durableDel[g.off]):
			// Under SyncNone the delete log is never synced: what the
			// power failure took of it comes back, and the open says so.
		case g.off < hd.head:
			t.Errorf("offset %d handed out, below the durable head %d", g.off, hd.head)
		case durableDel[g.off]:
			t.Errorf("offset %d handed out, its delete was on the disk", g.off)
		case g.off >= snapNext:
			t.Errorf("offset %d handed out, sent after the disk was taken (end %d then)", g.off, snapNext)
		case g.body != bodies[g.off]:
			t.Errorf("offset %d handed out with body %q, sent %q", g.off, g.body, bodies[g.off])
		}
	}
	for off := range bodies {
		if off < snapNext && off >= hd.head && !deleted[off] && !seen[off] {
			t.Errorf("offset %d (on the disk, never deleted) was not handed out", off)
		}
	}
	floor := max(hd.end, snapNext)
	off := mustSend(t, q, "after the power failure")
	if off < floor {
		t.Errorf("a new message took offset %d; the durable checkpoint's end is %d, the disk's log end %d (recovery %+v)", off, hd.end, snapNext, rec)
	}
	if t.Failed() {
		t.Logf("snapshot end %d, queue.head head %d end %d; recovery: head %d from %s, lost %d, deletes %d/%d, damage %q",
			snapNext, hd.head, hd.end, rec.Head, rec.HeadFrom, rec.Lost, rec.DeletesApplied, rec.DeleteRecords, rec.DeleteDamage)
		mustCloseQueue(t, q)
		return
	}
	t.Logf("snapshot end %d, durable head %d end %d, lost %d, handed out %d", snapNext, hd.head, hd.end, rec.Lost, len(got))
	mustCloseQueue(t, q)
	q = openTestQueue(t, disk, clock, opts)
	defer mustCloseQueue(t, q)
	if r := q.Recovery(); r.Lost != 0 || len(r.DeleteDamage) != 0 || r.CheckpointError != nil {
		t.Errorf("second open: %+v", r)
	}
	again := hOffsets(hDrain(t, q))
	want := append(hOffsets(got), off)
	slices.Sort(want)
	if !slices.Equal(again, want) {
		t.Errorf("second open handed out %v, want %v", again, want)
	}
}

// newestSegment returns the name of the newest segment file of the log in
// dir.
func newestSegment(dir string) string {
	entries, _ := os.ReadDir(dir)
	newest := ""
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".log") && len(n) == 24 && n > newest {
			newest = n
		}
	}
	return newest
}

// ---------------------------------------------------------------------------
// Promise 4: damage every file of a queue directory and reopen.

// hTemplate is a queue directory with known contents, closed.
type hTemplate struct {
	dir      string
	bodies   map[uint64]string
	deleted  hSet
	end      uint64
	ckHead   uint64              // the head in queue.head
	ckEnd    uint64              // the end in queue.head
	cleanEnd uint64              // the end log.clean records (0: none)
	msgRecs  map[uint64]hRecInfo // message records
	delRecs  map[uint64]hRecInfo // delete records, with bodies
	named    map[uint64][]uint64 // delete-log offset -> messages it names
	byMsg    map[uint64][]uint64 // message -> delete-log offsets naming it
	baseline Recovery            // what an open of the undamaged copy reports
}

// hBuildTemplate builds a queue of 260 messages over several segments, with
// a checkpointed head past a dropped segment and delete records over
// several delete-log segments. With crashed, the directory is copied while
// the queue is open (kill -9 under SyncNone), so no clean markers exist.
func hBuildTemplate(t *testing.T, crashed bool) *hTemplate {
	t.Helper()
	tp := &hTemplate{dir: t.TempDir(), bodies: map[uint64]string{}, deleted: hSet{}}
	clock := newFakeClock()
	q := openTestQueue(t, tp.dir, clock)
	for i := range 240 {
		tp.bodies[mustSend(t, q, hBody(i))] = hBody(i)
	}
	for _, m := range drain(t, q) {
		if m.Offset < 70 || (m.Offset%3 == 0 && m.Offset < 200) || m.Offset == 233 {
			mustDelete(t, q, m.Offset)
			tp.deleted[m.Offset] = true
		}
	}
	clock.Advance(time.Second) // checkpoint: head 71, segments below it dropped
	for i := 240; i < 260; i++ {
		tp.bodies[mustSend(t, q, hBody(i))] = hBody(i)
	}
	for _, off := range []uint64{245, 250, 251} {
		if err := q.Discard(off); err != nil {
			t.Fatal(err)
		}
		tp.deleted[off] = true
	}
	if q.log.First() == 0 {
		t.Fatal("template: no message segment was dropped")
	}
	if crashed {
		c := t.TempDir()
		testkit.MustCopyDir(t, tp.dir, c, true)
		mustCloseQueue(t, q)
		tp.dir = c
	} else {
		mustCloseQueue(t, q)
	}
	tp.end = 260
	h, err := readHead(tp.dir)
	if err != nil {
		t.Fatal(err)
	}
	tp.ckHead, tp.ckEnd = h.head, h.end
	if !crashed {
		tp.cleanEnd = tp.end
	}
	tp.msgRecs = hInspect(t, tp.dir, false)
	tp.delRecs = hInspect(t, filepath.Join(tp.dir, deletesDir), true)
	tp.named, tp.byMsg = map[uint64][]uint64{}, map[uint64][]uint64{}
	for at, r := range tp.delRecs {
		for _, m := range hNamed(r.body) {
			tp.named[at] = append(tp.named[at], m)
			tp.byMsg[m] = append(tp.byMsg[m], at)
		}
	}
	if segs := hSegments(t, filepath.Join(tp.dir, deletesDir)); len(segs) < 3 {
		t.Fatalf("template: delete log has %d segments, want several", len(segs))
	}
	c := t.TempDir()
	testkit.MustCopyDir(t, tp.dir, c, true)
	q = openTestQueue(t, c, clock)
	tp.baseline = q.Recovery()
	mustCloseQueue(t, q)
	return tp
}

// hCase is one way to damage a queue directory.
type hCase struct {
	name string
	// damage changes the copy in dir.
	damage func(t *testing.T, dir string)
	// redeliver: deleted messages this damage may hand out again (their
	// delete records were damaged).
	redeliver hSet
	// lost: messages whose own records were damaged: they may be missing,
	// or handed out with an error wrapping ErrCorrupt.
	lost hSet
	// mayFail: Open may refuse the directory (with a clear error).
	mayFail bool
	// reported: the damage must show in Recovery() (it differs from the
	// undamaged copy's).
	reported bool
	// headGone, cleanGone: the damage destroyed queue.head's end, or
	// log.clean's; offsets only they recorded may be given out again.
	headGone, cleanGone bool
	// closeMayFail: Close may report that it cannot write queue.head.
	closeMayFail bool
	// crashed: also run on the crashed template.
	crashed bool
	// noQueue: the damage leaves no delete log: Stat (and the CLI) may
	// call the directory "not a queue".
	noQueue bool
}

func hDeletedBelow(tp *hTemplate, h uint64) hSet {
	s := hSet{}
	for off := range tp.deleted {
		if off < h {
			s[off] = true
		}
	}
	return s
}

// hRecsIn returns the offsets of the records (of recs) that lie in seg at
// or after position from, or that end after it.
func hRecsIn(recs map[uint64]hRecInfo, seg string, from int64) []uint64 {
	var out []uint64
	for at, r := range recs {
		if r.seg == seg && r.pos+r.len > from {
			out = append(out, at)
		}
	}
	slices.Sort(out)
	return out
}

func hNamedBy(tp *hTemplate, ats []uint64) hSet {
	s := hSet{}
	for _, at := range ats {
		for _, m := range tp.named[at] {
			s[m] = true
		}
	}
	return s
}

func hMsgsIn(tp *hTemplate, seg string, from int64) hSet {
	s := hSet{}
	for _, off := range hRecsIn(tp.msgRecs, seg, from) {
		s[off] = true
	}
	return s
}

func hRemoveSegment(t *testing.T, dir, seg string) {
	base := strings.TrimSuffix(seg, ".log")
	for _, suffix := range []string{".log", ".index", ".timeindex"} {
		if err := os.Remove(filepath.Join(dir, base+suffix)); err != nil && suffix == ".log" {
			t.Fatal(err)
		}
	}
}

// hSpread picks up to n elements of xs, spread out, always the first and
// the last.
func hSpread[T any](xs []T, n int) []T {
	if len(xs) <= n {
		return xs
	}
	out := make([]T, 0, n)
	for i := range n {
		out = append(out, xs[i*(len(xs)-1)/(n-1)])
	}
	return out
}

func hCases(t *testing.T, tp *hTemplate) []hCase {
	var cs []hCase
	add := func(c hCase) { cs = append(cs, c) }
	head := headName
	belowHead := hDeletedBelow(tp, tp.ckHead)
	write := func(rel string, b []byte) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, rel), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	rewrite := func(rel string, f func([]byte) []byte) func(*testing.T, string) {
		return func(t *testing.T, dir string) { hRewrite(t, filepath.Join(dir, rel), f) }
	}
	remove := func(rel string) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, rel)); err != nil {
				t.Fatal(err)
			}
		}
	}
	badHead := func(name string, damage func(*testing.T, string)) hCase {
		return hCase{name: name, damage: damage, redeliver: belowHead, reported: true, headGone: true}
	}

	// queue.head: an untrusted head may redeliver what only it recorded.
	add(hCase{name: "queue.head removed", damage: remove(head), redeliver: belowHead, reported: true, headGone: true, crashed: true})
	add(badHead("queue.head empty", write(head, nil)))
	for _, n := range []int{headSize - 1} {
		add(badHead(fmt.Sprintf("queue.head cut to %d bytes", n), rewrite(head, func(b []byte) []byte { return b[:n] })))
	}
	for _, i := range []int{0, 8, 20} {
		c := badHead(fmt.Sprintf("queue.head byte %d flipped", i), rewrite(head, func(b []byte) []byte { b[i] ^= 0x01; return b }))
		add(c)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{headSize} {
		g := make([]byte, n)
		for i := range g {
			g[i] = byte(rng.Uint32())
		}
		add(badHead(fmt.Sprintf("queue.head %d bytes of garbage", n), write(head, g)))
	}
	// A directory (or a FIFO, a link) in place of queue.head fails the
	// open: TestOpenRefusesWhatIsNotAFileInPlaceOfTheHeadCheckpoint.
	add(badHead("queue.head end below head (valid checksum)", func(t *testing.T, dir string) {
		b := make([]byte, headSize)
		b[0] = headVersion3
		binary.BigEndian.PutUint64(b[1:], tp.ckHead)
		binary.BigEndian.PutUint64(b[9:], tp.ckHead-1)
		binary.BigEndian.PutUint32(b[headSize-4:], crc32c(b[:headSize-4]))
		write(head, b)(t, dir)
	}))
	add(hCase{name: "queue.head.tmp left with garbage", damage: write(headName+".tmp", []byte("half a checkpoint"))})
	add(hCase{name: "queue.head version 2 (valid, no side-log spans)", damage: func(t *testing.T, dir string) {
		b := make([]byte, headSize2)
		b[0] = headVersion2
		binary.BigEndian.PutUint64(b[1:], tp.ckHead)
		binary.BigEndian.PutUint64(b[9:], tp.ckEnd)
		binary.BigEndian.PutUint32(b[17:], crc32c(b[:17]))
		write(head, b)(t, dir)
	}})
	add(hCase{name: "queue.head version 1 (valid, no end)", headGone: true, damage: func(t *testing.T, dir string) {
		b := make([]byte, headSize1)
		b[0] = headVersion1
		binary.BigEndian.PutUint64(b[1:], tp.ckHead)
		binary.BigEndian.PutUint32(b[9:], crc32c(b[:9]))
		write(head, b)(t, dir)
	}})

	// The delete log.
	delSegs := hSegments(t, filepath.Join(tp.dir, deletesDir))
	lastDel := delSegs[len(delSegs)-1]
	ats := make([]uint64, 0, len(tp.delRecs))
	for at := range tp.delRecs {
		ats = append(ats, at)
	}
	slices.Sort(ats)
	for k, at := range hSpread(ats, 3) {
		r := tp.delRecs[at]
		rel := filepath.Join(deletesDir, r.seg)
		for _, where := range []struct {
			name string
			pos  int64
		}{{"body", r.len - 1}, {"checksum", 5}, {"length", 2}, {"id", 12}} {
			if where.name != "body" && k != 1 {
				continue
			}
			add(hCase{
				name:      fmt.Sprintf("delete record %d (%s+%d) %s flipped", at, r.seg, r.pos, where.name),
				damage:    rewrite(rel, func(b []byte) []byte { b[r.pos+where.pos] ^= 0x10; return b }),
				redeliver: hNamedBy(tp, []uint64{at}), reported: true, crashed: k == 2 && where.name == "body",
			})
		}
	}
	for _, seg := range hSpread(delSegs, 3) {
		recs := hRecsIn(tp.delRecs, seg, 0)
		add(hCase{name: "delete segment " + seg + " removed", damage: func(t *testing.T, dir string) { hRemoveSegment(t, filepath.Join(dir, deletesDir), seg) },
			redeliver: hNamedBy(tp, recs), reported: true, crashed: seg == lastDel})
	}
	add(hCase{name: "delete segment index garbage", damage: write(filepath.Join(deletesDir, strings.TrimSuffix(delSegs[1], ".log")+".index"), []byte("garbage garbage garbage")), reported: true})
	for _, seg := range []string{lastDel} {
		rel := filepath.Join(deletesDir, seg)
		for k, at := range hSpread(hRecsIn(tp.delRecs, seg, 0), 2) {
			r := tp.delRecs[at]
			for _, cut := range []int64{r.pos, r.pos + 9} {
				add(hCase{name: fmt.Sprintf("delete segment %s cut at %d", seg, cut),
					damage:    rewrite(rel, func(b []byte) []byte { return b[:cut] }),
					redeliver: hNamedBy(tp, hRecsIn(tp.delRecs, seg, cut)), reported: true, crashed: seg == lastDel && k == 1})
			}
		}
	}
	lastRec := tp.delRecs[ats[len(ats)-1]]
	add(hCase{name: "garbage after the last delete record", damage: rewrite(filepath.Join(deletesDir, lastRec.seg), func(b []byte) []byte {
		copy(b[lastRec.pos+lastRec.len:], "\x07\x00\x00\x00garbage after the end of the delete log")
		return b
	}), reported: true, crashed: true})
	allDel := hSet{}
	for off := range tp.deleted {
		if off >= tp.ckHead {
			allDel[off] = true
		}
	}
	add(hCase{name: "deletes/ emptied", damage: func(t *testing.T, dir string) {
		entries, _ := os.ReadDir(filepath.Join(dir, deletesDir))
		for _, e := range entries {
			os.RemoveAll(filepath.Join(dir, deletesDir, e.Name()))
		}
	}, redeliver: allDel, reported: true, noQueue: true})
	add(hCase{name: "deletes/ removed", damage: remove(deletesDir), redeliver: allDel, reported: true, noQueue: true})
	for _, f := range []string{"log.meta", "log.clean"} {
		add(hCase{name: "deletes/" + f + " garbage", damage: write(filepath.Join(deletesDir, f), []byte("not a checkpoint at all")), reported: true})
	}
	add(hCase{name: "deletes/log.meta.tmp left", damage: write(filepath.Join(deletesDir, "log.meta.tmp"), []byte("x"))})

	// The message log.
	msgSegs := hSegments(t, tp.dir)
	lastMsg := msgSegs[len(msgSegs)-1]
	offs := make([]uint64, 0, len(tp.msgRecs))
	for off := range tp.msgRecs {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	for k, off := range hSpread(offs, 3) {
		r := tp.msgRecs[off]
		add(hCase{name: fmt.Sprintf("message %d (%s+%d) body flipped", off, r.seg, r.pos),
			damage: rewrite(r.seg, func(b []byte) []byte { b[r.pos+r.len-3] ^= 0x20; return b }),
			lost:   hSet{off: true}, crashed: k == 2})
		if k%2 == 0 {
			add(hCase{name: fmt.Sprintf("message %d length flipped", off),
				damage: rewrite(r.seg, func(b []byte) []byte { b[r.pos+1] ^= 0x01; return b }),
				lost:   hSet{off: true}})
		}
	}
	for i, seg := range msgSegs {
		if i != 0 && i != len(msgSegs)/2 && i != len(msgSegs)-1 {
			continue
		}
		add(hCase{name: "message segment " + seg + " removed", damage: func(t *testing.T, dir string) { hRemoveSegment(t, dir, seg) },
			lost: hMsgsIn(tp, seg, 0), reported: true, crashed: seg == lastMsg})
		base := strings.TrimSuffix(seg, ".log")
		if i == 0 {
			add(hCase{name: "message segment " + seg + " index garbage", damage: write(base+".index", []byte("garbage garbage garbage garbage")), reported: true})
		}
		if i == len(msgSegs)-1 {
			for k, off := range hSpread(hRecsIn(tp.msgRecs, seg, 0), 2) {
				r := tp.msgRecs[off]
				add(hCase{name: fmt.Sprintf("message segment %s cut at record %d", seg, off),
					damage: rewrite(seg, func(b []byte) []byte { return b[:r.pos] }),
					lost:   hMsgsIn(tp, seg, r.pos), reported: true, crashed: seg == lastMsg && k == 1})
				if seg == lastMsg {
					add(hCase{name: fmt.Sprintf("message segment %s zeroed from record %d", seg, off),
						damage: rewrite(seg, func(b []byte) []byte { clear(b[r.pos:]); return b }),
						lost:   hMsgsIn(tp, seg, r.pos), reported: true, crashed: k == 1})
				}
			}
		}
	}
	all := hSet{}
	for off := range tp.msgRecs {
		all[off] = true
	}
	add(hCase{name: "every message segment removed", damage: func(t *testing.T, dir string) {
		for _, seg := range msgSegs {
			hRemoveSegment(t, dir, seg)
		}
	}, lost: all, reported: true, crashed: true})
	add(hCase{name: "newest message segment renamed", damage: func(t *testing.T, dir string) {
		base := strings.TrimSuffix(lastMsg, ".log")
		for _, suffix := range []string{".log", ".index", ".timeindex"} {
			os.Rename(filepath.Join(dir, base+suffix), filepath.Join(dir, fmt.Sprintf("%020d", 5000)+suffix))
		}
	}, mayFail: true, lost: hMsgsIn(tp, lastMsg, 0), reported: true})
	add(hCase{name: "log.meta garbage", damage: write("log.meta", []byte("not a checkpoint at all")), reported: true})
	add(hCase{name: "log.clean removed", damage: remove("log.clean"), reported: true, cleanGone: true})
	add(hCase{name: "log.clean garbage", damage: write("log.clean", []byte("not a checkpoint at all")), reported: true, cleanGone: true})
	add(hCase{name: "log.recovery garbage", damage: write("log.recovery", []byte("not a recovery point")), reported: true})
	for _, f := range []string{msgSegs[0] + ".tmp"} {
		add(hCase{name: f + " left behind", damage: write(f, []byte("left behind"))})
	}
	add(hCase{name: "queue.head and the newest message segment removed", damage: func(t *testing.T, dir string) {
		remove(headName)(t, dir)
		hRemoveSegment(t, dir, lastMsg)
	}, redeliver: belowHead, lost: hMsgsIn(tp, lastMsg, 0), reported: true, headGone: true, crashed: true})
	add(hCase{name: "queue.head, log.clean and the newest message segment removed", damage: func(t *testing.T, dir string) {
		remove(headName)(t, dir)
		remove("log.clean")(t, dir)
		hRemoveSegment(t, dir, lastMsg)
	}, redeliver: belowHead, lost: hMsgsIn(tp, lastMsg, 0), reported: true, headGone: true, cleanGone: true})
	return cs
}

func crc32c(b []byte) uint32 { return checkpoint.Sum(b) }

// TestQueueDamageEveryFileReopens damages every file of a queue directory,
// one way at a time, and reopens it: Open succeeds (or, for a misnamed
// segment, fails with a clear error), Recovery reports the damage, no
// deleted message comes back unless the damage destroyed the record of its
// delete, no undeleted message is lost unless its own record was damaged,
// and a damaged message is never handed out with a wrong body. A second
// open after that hands out the same messages, and no new message takes an
// offset given out before (unless every record of the end was destroyed).
func TestQueueDamageEveryFileReopens(t *testing.T) {
	old := deleteSegmentBytes
	deleteSegmentBytes = 24 * 16 // 16 delete records per segment
	t.Cleanup(func() { deleteSegmentBytes = old })
	for _, crashed := range []bool{false, true} {
		tp := hBuildTemplate(t, crashed)
		t.Run(fmt.Sprint("crashed=", crashed), func(t *testing.T) {
			// Four at a time: most of a case is waiting for fsync.
			cases := make(chan hCase)
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for c := range cases {
						t.Run(c.name, func(t *testing.T) { hDamageCase(t, tp, c) })
					}
				}()
			}
			for _, c := range hCases(t, tp) {
				if !crashed || c.crashed {
					cases <- c
				}
			}
			close(cases)
			wg.Wait()
		})
	}
}

func hDamageCase(t *testing.T, tp *hTemplate, c hCase) {
	dir := t.TempDir()
	testkit.MustCopyDir(t, tp.dir, dir, true)
	c.damage(t, dir)
	// Stat reads the damaged queue without changing a file.
	before := hTreeHash(t, dir)
	st, statErr := Stat(dir)
	if after := hTreeHash(t, dir); after != before {
		t.Errorf("Stat changed the directory")
	}
	clock := newFakeClock()
	q, err := Open(dir, Options{Log: engine.Options{SegmentBytes: 4096}, Visibility: testVisibility, Clock: clock})
	if statErr != nil && err == nil && !(c.noQueue && errors.Is(statErr, ErrNotQueue)) {
		t.Errorf("Stat failed on a queue that opens: %v", statErr)
	}
	if err != nil {
		if !c.mayFail {
			t.Fatalf("Open failed: %v", err)
		}
		if msg := err.Error(); len(msg) < 10 {
			t.Fatalf("Open failed with an unclear error %q", msg)
		}
		return
	}
	rec := q.Recovery()
	got := hDrain(t, q)
	seen := hSet{}
	for _, g := range got {
		if seen[g.off] {
			t.Errorf("offset %d handed out twice right after open", g.off)
		}
		seen[g.off] = true
		if g.err != nil {
			if !c.lost[g.off] || !errors.Is(g.err, engine.ErrCorrupt) {
				t.Errorf("offset %d handed out with an error: %v", g.off, g.err)
			}
			continue
		}
		want, ok := tp.bodies[g.off]
		switch {
		case !ok:
			t.Errorf("offset %d handed out, never sent (body %q)", g.off, g.body)
		case g.body != want:
			t.Errorf("offset %d handed out with body %q, sent %q", g.off, g.body, want)
		case tp.deleted[g.off] && !c.redeliver[g.off]:
			t.Errorf("offset %d handed out, deleted (its delete records: %v)", g.off, tp.byMsg[g.off])
		}
	}
	var missing []uint64
	for off := range tp.bodies {
		if !tp.deleted[off] && !c.lost[off] && !seen[off] {
			missing = append(missing, off)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("undeleted messages not handed out: %v", missing)
	}
	if statErr == nil {
		// stats counts what Open hands out (README: "stats counts the
		// messages from queue.head and the delete log").
		if st.Messages != uint64(len(got)) {
			t.Errorf("Stat says %d messages; Open hands out %d", st.Messages, len(got))
		}
	}
	if c.reported && hRecoveryKey(rec) == hRecoveryKey(tp.baseline) {
		t.Errorf("the damage is not reported: Recovery() is the undamaged copy's: %s", hRecoveryKey(rec))
	}
	off, err := q.Send([]byte("after the damage"))
	if err != nil {
		t.Errorf("Send after the damage: %v", err)
	} else {
		floor := uint64(0)
		if !c.headGone {
			floor = tp.ckEnd
		}
		if !c.cleanGone {
			floor = max(floor, tp.cleanEnd)
		}
		if off < floor {
			t.Errorf("a new message took offset %d, below the end %d a surviving checkpoint recorded (queue.head %d, log.clean %d)", off, floor, tp.ckEnd, tp.cleanEnd)
		}
	}
	if t.Failed() {
		t.Logf("recovery: %s", hRecoveryKey(rec))
	}
	if err := q.Close(); err != nil && !c.closeMayFail {
		t.Errorf("Close: %v", err)
	}
	if len(c.redeliver) == 0 && len(c.lost) == 0 && !c.headGone && !c.reported {
		return // nothing was lost or redelivered: a second open would show nothing new
	}
	q, err = Open(dir, Options{Log: engine.Options{SegmentBytes: 4096}, Visibility: testVisibility, Clock: clock})
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer q.Close()
	var again, want []uint64
	for _, g := range hDrain(t, q) {
		again = append(again, g.off)
	}
	want = hOffsets(got)
	if err == nil {
		want = append(want, off)
	}
	slices.Sort(want)
	slices.Sort(again)
	if !slices.Equal(again, want) {
		t.Errorf("second open handed out %v\nwant (the first open's) %v", again, want)
	}
}

// hRecoveryKey is a Recovery without its timings, as a string.
func hRecoveryKey(r Recovery) string {
	r.Log.Took, r.Deletes.Took = 0, 0
	return fmt.Sprintf("%+v", r)
}

// hTreeHash fingerprints every file under dir: names, sizes, modes, times
// and contents.
func hTreeHash(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %v", path, info.Mode(), info.Size(), info.ModTime().UnixNano())
		if d.Type().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", crc32c(data))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Promise 3: every method called concurrently, Close at a random moment.

// hHandout is one hand-out seen by a concurrent receiver.
type hHandout struct {
	off      uint64
	receives int
	at       time.Time // Deadline - Visibility: when the queue handed it out
	deadline time.Time
	body     string
	late     bool   // the body was copied after the deadline (real clock)
	started  uint64 // event number when the Receive call began
	worker   int
}

// hConcurrentRun is the state of one concurrent run.
type hConcurrentRun struct {
	t      *testing.T
	q      *Queue
	vis    time.Duration
	manual *ManualClock
	timeMu sync.RWMutex // held for writing while the manual clock moves

	events  atomic.Uint64 // a global order of calls and returns
	closing atomic.Bool   // set just before Close is called
	closeMu sync.RWMutex  // held for writing while closing is set: bodies are read under it

	mu       sync.Mutex
	sent     map[uint64]string
	handouts []hHandout
	deleted  map[uint64]uint64 // offset -> event number when its Delete returned nil
	deleting map[uint64]bool   // Delete or Discard called (maybe not returned)
	errs     []string
}

func (r *hConcurrentRun) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) < 20 {
		r.errs = append(r.errs, fmt.Sprintf(format, args...))
	}
}

// checkErr accepts err when it is one of ok, or ErrClosed once Close began.
func (r *hConcurrentRun) checkErr(what string, err error, ok ...error) bool {
	if err == nil {
		return true
	}
	if errors.Is(err, engine.ErrClosed) {
		if !r.closing.Load() {
			r.fail("%s: ErrClosed before Close was called: %v", what, err)
		}
		return false
	}
	for _, e := range ok {
		if errors.Is(err, e) {
			return true
		}
	}
	r.fail("%s: unexpected error: %v", what, err)
	return false
}

func hConcurrent(t *testing.T, manual bool, seed uint64) {
	vis := 10 * time.Second
	var clock Clock = systemClock{}
	r := &hConcurrentRun{t: t, sent: map[uint64]string{}, deleted: map[uint64]uint64{}, deleting: map[uint64]bool{}}
	if manual {
		r.manual = newFakeClock()
		clock = r.manual
	} else {
		vis = 30 * time.Millisecond
	}
	r.vis = vis
	dir := t.TempDir()
	q, err := Open(dir, Options{
		Log:                engine.Options{SegmentBytes: 4096},
		Visibility:         vis,
		CheckpointInterval: vis / 10,
		Clock:              clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.q = q
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var held [][]byte // raw bodies, read again after Close
	var heldMu sync.Mutex

	for s := range 2 { // senders
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				body := fmt.Sprintf("conc-%d-%06d-%s", s, i, strings.Repeat("z", i%50))
				off, err := q.Send([]byte(body))
				if !r.checkErr("Send", err) {
					return
				}
				r.mu.Lock()
				r.sent[off] = body
				r.mu.Unlock()
				if i%64 == 63 {
					select {
					case <-stop:
						return
					default:
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
	}
	for w := range 6 { // receivers
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for {
				started := r.events.Add(1)
				var m Message
				var err error
				switch rng.IntN(4) {
				case 0:
					var ok bool
					m, ok, err = q.TryReceive()
					if err == nil && !ok {
						select {
						case <-stop:
							return
						default:
						}
						runtime.Gosched()
						continue
					}
				case 1:
					ctx, cancel := context.WithCancel(context.Background())
					if rng.IntN(2) == 0 {
						cancel() // already done: must return ctx.Err() and change nothing
					} else {
						d := time.Duration(rng.IntN(300)) * time.Microsecond
						go func() { time.Sleep(d); cancel() }()
					}
					m, err = q.Receive(ctx)
					cancel()
				default:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(3))*time.Millisecond)
					m, err = q.Receive(ctx)
					cancel()
				}
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					if m.Offset != 0 || m.Body != nil || m.Receives != 0 {
						r.fail("Receive returned %v with a message %+v", err, m)
					}
					select {
					case <-stop:
						return
					default:
					}
					continue
				}
				if !r.checkErr("Receive", err) {
					return
				}
				// Close ends every body's lifetime: read it only before.
				r.closeMu.RLock()
				r.timeMu.RLock()
				late := r.closing.Load()
				body := string(m.Body)
				if manual {
					late = late || !r.manual.Now().Before(m.Deadline)
				} else {
					late = late || time.Now().After(m.Deadline)
				}
				r.timeMu.RUnlock()
				r.closeMu.RUnlock()
				r.mu.Lock()
				r.handouts = append(r.handouts, hHandout{off: m.Offset, receives: m.Receives, at: m.Deadline.Add(-vis),
					deadline: m.Deadline, body: body, late: late, started: started, worker: w})
				r.mu.Unlock()
				if rng.IntN(8) == 0 {
					heldMu.Lock()
					held = append(held, m.Body)
					heldMu.Unlock()
				}
				if manual && rng.IntN(3) == 0 {
					// The body stays its own until this receiver's deadline.
					runtime.Gosched()
					r.closeMu.RLock()
					r.timeMu.RLock()
					if !late && !r.closing.Load() && r.manual.Now().Before(m.Deadline) && string(m.Body) != body {
						r.fail("offset %d: body changed within its deadline: %q, was %q", m.Offset, m.Body, body)
					}
					r.timeMu.RUnlock()
					r.closeMu.RUnlock()
				}
				switch p := rng.IntN(10); {
				case p < 6:
					r.mu.Lock()
					r.deleting[m.Offset] = true
					r.mu.Unlock()
					err := q.Delete(m.Offset)
					done := r.events.Add(1)
					if !r.checkErr("Delete", err) {
						return
					}
					r.mu.Lock()
					if _, ok := r.deleted[m.Offset]; !ok {
						r.deleted[m.Offset] = done
					}
					r.mu.Unlock()
					if rng.IntN(4) == 0 {
						r.checkErr("second Delete", q.Delete(m.Offset))
					}
				case p < 7:
					off := uint64(rng.IntN(int(q.Stats().End) + 3))
					err := q.Delete(off) // never handed out, or someone else's
					r.checkErr("Delete of a random offset", err, ErrNotInFlight)
					if err == nil {
						r.mu.Lock()
						r.deleting[off] = true
						r.mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // Discard, Stats and Recovery
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 100))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			st := q.Stats()
			if st.Head > st.Cursor || st.Cursor > st.End {
				r.fail("Stats out of order: %+v", st)
			}
			_ = q.Recovery()
			if i%5 == 0 {
				var off uint64
				switch rng.IntN(4) {
				case 0:
					off = math.MaxUint64
				case 1:
					off = st.End + uint64(rng.IntN(5))
				default:
					off = st.Cursor + uint64(rng.IntN(20))
				}
				r.mu.Lock()
				r.deleting[off] = true
				r.mu.Unlock()
				err := q.Discard(off)
				done := r.events.Add(1)
				if r.checkErr("Discard", err, engine.ErrNotFound) && err == nil {
					r.mu.Lock()
					if _, ok := r.deleted[off]; !ok {
						r.deleted[off] = done
					}
					r.mu.Unlock()
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	if manual {
		wg.Add(1)
		go func() { // the clock
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 200))
			for {
				select {
				case <-stop:
					return
				default:
				}
				r.timeMu.Lock()
				r.manual.Advance(time.Duration(rng.Int64N(int64(vis / 3))))
				r.timeMu.Unlock()
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(seed, 300))
	time.Sleep(time.Duration(150+rng.IntN(250)) * time.Millisecond)
	r.closeMu.Lock()
	r.closing.Store(true)
	r.closeMu.Unlock()
	cerr := q.Close()
	close(stop)
	wg.Wait()
	if cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	// Bodies used after Close never crash the process.
	sum := 0
	for _, b := range held {
		for _, c := range b {
			sum += int(c)
		}
	}
	for _, e := range r.errs {
		t.Error(e)
	}

	// Per offset: Receives 1, 2, 3... in hand-out order, never handed out
	// again before the previous hand-out's deadline, bodies as sent, never
	// handed out by a Receive that began after its Delete returned.
	byOff := map[uint64][]hHandout{}
	for _, h := range r.handouts {
		byOff[h.off] = append(byOff[h.off], h)
		if want, ok := r.sent[h.off]; ok && h.body != want && !h.late {
			t.Errorf("offset %d handed out with body %q, sent %q", h.off, h.body, want)
		}
		if at, ok := r.deleted[h.off]; ok && h.started > at {
			t.Errorf("offset %d handed out by a Receive that began after its Delete returned", h.off)
		}
	}
	redeliveries := 0
	for off, hs := range byOff {
		slices.SortFunc(hs, func(a, b hHandout) int { return a.receives - b.receives })
		for i, h := range hs {
			if h.receives != i+1 {
				t.Errorf("offset %d: hand-outs have Receives %v", off, hReceives(hs))
				break
			}
			if i > 0 && h.at.Before(hs[i-1].deadline) {
				t.Errorf("offset %d handed to worker %d at %v, before worker %d's deadline %v",
					off, h.worker, h.at, hs[i-1].worker, hs[i-1].deadline)
			}
		}
		redeliveries += len(hs) - 1
	}
	t.Logf("%d sent, %d hand-outs (%d redeliveries), %d deleted, stale bodies read (sum %d)", len(r.sent), len(r.handouts), redeliveries, len(r.deleted), sum)

	// After the reopen: every acknowledged send not deleted comes back,
	// no acknowledged delete does.
	q, err = Open(dir, Options{Log: engine.Options{SegmentBytes: 4096}, Visibility: vis, Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	seen := hSet{}
	for _, g := range hDrain(t, q) {
		seen[g.off] = true
		if g.err != nil {
			t.Errorf("after reopen: offset %d: %v", g.off, g.err)
		} else if want, ok := r.sent[g.off]; ok && g.body != want {
			t.Errorf("after reopen: offset %d body %q, sent %q", g.off, g.body, want)
		} else if !ok && !strings.HasPrefix(g.body, "conc-") {
			t.Errorf("after reopen: offset %d body %q was never sent", g.off, g.body)
		}
		if _, ok := r.deleted[g.off]; ok {
			t.Errorf("after reopen: offset %d handed out, its Delete returned nil", g.off)
		}
	}
	for off := range r.sent {
		if !seen[off] && !r.deleting[off] {
			t.Errorf("after reopen: offset %d (sent, never deleted) is missing", off)
		}
	}
}

func hReceives(hs []hHandout) []int {
	var out []int
	for _, h := range hs {
		out = append(out, h.receives)
	}
	return out
}

func TestQueueConcurrentManualClock(t *testing.T) {
	t.Parallel()
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { hConcurrent(t, true, seed) })
	}
}

func TestQueueConcurrentRealClock(t *testing.T) {
	t.Parallel()
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { hConcurrent(t, false, seed) })
	}
}

// ---------------------------------------------------------------------------
// Promise 2: body lifetime.

// TestQueueStaleBodyAfterRangeReuseNoFault: README: "Used after its
// lifetime, a body never crashes the process ... it reads its own bytes,
// zeros, or, once the queue reuses that address range for a later segment
// of its own, bytes of a later message of the same queue". Here a body from
// the end of a segment outlives its deadline; the segment is dropped, its
// address range is reused by a later active segment, and that segment is
// sealed short (a large message did not fit), which trims its file. Reading
// the stale body must not crash. It runs in a child process, because the
// failure is a fault that kills the process.
func TestQueueStaleBodyAfterRangeReuseNoFault(t *testing.T) {
	if os.Getenv("PAGELOG_QUEUE_STALE_CHILD") == "1" {
		hStaleBodyChild(t)
		return
	}
	out, err := hChild(t, "^TestQueueStaleBodyAfterRangeReuseNoFault$", "PAGELOG_QUEUE_STALE_CHILD=1")
	if err != nil || !strings.Contains(out, "stale body read:") {
		t.Fatalf("reading a stale body after its range was reused by a segment sealed short: %v\n%s", err, hTail(out, 25))
	}
}

func hStaleBodyChild(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) { o.Log.SegmentBytes = 64 << 10 })
	defer q.Close()
	body := make([]byte, 100)
	for i := range 600 {
		copy(body, fmt.Sprintf("m%05d", i))
		mustSend(t, q, string(body))
	}
	var stale []byte
	for _, m := range drain(t, q) {
		if m.Offset == 500 { // near the end of the first segment
			stale = m.Body
		}
		mustDelete(t, q, m.Offset)
	}
	clock.Advance(11 * time.Second) // deadlines pass; the checkpoint drops the first segment
	for range 600 {
		mustSend(t, q, string(body)) // the active segment fills; the next one reuses the freed range
	}
	for range 40 {
		mustSend(t, q, string(body))
	}
	if _, err := q.Send(make([]byte, 62<<10)); err != nil { // does not fit: that segment is sealed short
		t.Fatal(err)
	}
	sum := 0
	for _, c := range stale {
		sum += int(c)
	}
	fmt.Printf("stale body read: byte sum %d\n", sum)
}

// hChild runs this test binary with -test.run=run and env, and returns its
// combined output.
func hChild(t *testing.T, run string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func hTail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

var hTag = regexp.MustCompile(`<<[A-Z][0-9]{2}>>`)

// hForeign returns the first tag in b that is not own.
func hForeign(b []byte, own string) string {
	for _, m := range hTag.FindAll(b, -1) {
		if string(m) != own {
			return string(m)
		}
	}
	return ""
}

func hTagged(tag string, i int) string {
	return fmt.Sprintf("%s#%05d#%s", tag, i, strings.Repeat(tag, 4+i%9))
}

// TestQueueBodiesNeverAnotherQueues: a queue's bodies stay their own until
// their deadline while another receiver deletes the message late, the head
// moves past it and its segment is dropped, and 24 other queues are opened,
// filled, drained and closed in the same process. After their lifetimes
// (deadline or Close), bodies read zeros or their own queue's bytes, never
// another queue's, and never crash.
func TestQueueBodiesNeverAnotherQueues(t *testing.T) {
	t.Parallel() // reads deleteSegmentBytes only: runs after the tests that set it
	clock := newFakeClock()
	small := func(o *Options) {
		o.Log.SegmentBytes = 4096
		o.Visibility = 10 * time.Second
		o.CheckpointInterval = time.Second
	}
	root := t.TempDir()
	a := openTestQueue(t, filepath.Join(root, "A"), clock, small)
	defer a.Close()
	for i := range 200 {
		mustSend(t, a, hTagged("<<A00>>", i))
	}
	// Worker 1 receives 21 messages and is late; after their deadline
	// worker 2 gets them again and holds their bodies; worker 1's late
	// deletes then delete them, so the head moves past them and their
	// segments can be dropped while worker 2's deadline runs.
	var late []uint64
	for range 21 {
		m, _ := tryRecv(t, a)
		late = append(late, m.Offset)
	}
	clock.Advance(10 * time.Second)
	var held []Message
	for range 21 {
		m, _ := tryRecv(t, a)
		if m.Receives != 2 {
			t.Fatalf("redelivery: %+v", m)
		}
		held = append(held, m)
	}
	m0 := held[0]
	own0 := string(m0.Body)
	for _, off := range late {
		mustDelete(t, a, off) // worker 1's late deletes
	}
	type stale struct {
		body []byte
		tag  string
	}
	var stales []stale
	check := func(when string) {
		t.Helper()
		if string(m0.Body) != own0 {
			t.Fatalf("%s: a body changed within its deadline: %q, was %q", when, m0.Body, own0)
		}
		for _, m := range held {
			if want := hTagged("<<A00>>", int(m.Offset)); string(m.Body) != want {
				t.Fatalf("%s: offset %d's body changed within its deadline: %q", when, m.Offset, m.Body)
			}
		}
	}
	for k := 1; k <= 24; k++ {
		tag := fmt.Sprintf("<<Q%02d>>", k)
		dir := filepath.Join(root, fmt.Sprint("q", k))
		q := openTestQueue(t, dir, clock, small)
		for i := range 60 + 7*k {
			mustSend(t, q, hTagged(tag, i))
		}
		ms := drain(t, q)
		for i, m := range ms {
			if i%3 != 0 {
				mustDelete(t, q, m.Offset)
			}
			if i%11 == 0 {
				stales = append(stales, stale{m.Body, tag})
			}
		}
		clock.Advance(time.Second / 4) // checkpoints of every queue: segments dropped
		check(fmt.Sprintf("after queue %d", k))
		// A's head moves on too: its segments below go.
		for range 5 {
			if m, ok := tryRecv(t, a); ok {
				mustDelete(t, a, m.Offset)
			}
		}
		if k%3 == 0 {
			mustCloseQueue(t, q) // its bodies are stale now
		} else {
			defer q.Close()
		}
	}
	check("at the end")
	if a.log.First() == 0 {
		t.Fatal("A's first segment was not dropped: the test does not test what it says")
	}
	clock.Advance(20 * time.Second) // every deadline passes
	for i := range 300 {
		mustSend(t, a, hTagged("<<A00>>", 1000+i))
	}
	for _, m := range drain(t, a) {
		mustDelete(t, a, m.Offset)
	}
	clock.Advance(2 * time.Second)
	for _, m := range append(held, m0) {
		stales = append(stales, stale{m.Body, "<<A00>>"})
	}
	for _, s := range stales {
		if f := hForeign(s.body, s.tag); f != "" {
			t.Errorf("a stale body of %s shows another queue's bytes (%s): %q", s.tag, f, s.body)
		}
	}
}

// TestQueueStaleBodyNewQueueSamePath: a queue is closed and its
// directory removed; a new, different queue is created at the same path,
// in a directory the file system gave the old one's inode number (ext4
// reuses freed inodes; the test makes directories until one gets it). A
// stale body of the first queue must not show the second queue's bytes:
// they are different queues. (The address-range pool is keyed by path,
// device and inode: engine/open.go rangesFor.)
func TestQueueStaleBodyNewQueueSamePath(t *testing.T) {
	clock := newFakeClock()
	root := t.TempDir()
	path := filepath.Join(root, "q")
	ino := func(p string) uint64 {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return testkit.Inode(st)
	}
	q := openTestQueue(t, path, clock)
	for i := range 50 {
		mustSend(t, q, hTagged("<<P01>>", i))
	}
	ms := drain(t, q)
	stale := ms[len(ms)-1].Body
	mustCloseQueue(t, q)
	old := ino(path)
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	found := false
	for i := range 300 {
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if ino(path) == old {
			found = true
			break
		}
		if err := os.Rename(path, filepath.Join(root, fmt.Sprint("other", i))); err != nil {
			t.Fatal(err)
		}
	}
	if !found {
		t.Skipf("the file system did not reuse inode %d for a new directory", old)
	}
	q = openTestQueue(t, path, clock)
	defer q.Close()
	for i := range 50 {
		mustSend(t, q, hTagged("<<P02>>", i))
	}
	drain(t, q)
	if f := hForeign(stale, "<<P01>>"); f != "" {
		t.Fatalf("a stale body of the first queue at %s shows the second queue's bytes (%s): %q", path, f, stale)
	}
}

// ---------------------------------------------------------------------------
// Promise 5: deadlines on a ManualClock.

// TestQueueDeadlinesExact: a message is never handed out again before
// its deadline (not even 1 ns before), and always at it: by the next
// TryReceive, and by the timer to a blocked Receive, lowest offset first,
// Receives one more each time, Deadline exactly now + Visibility.
func TestQueueDeadlinesExact(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer q.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	type st struct {
		deadline time.Time
		receives int
		deleted  bool
	}
	state := map[uint64]*st{}
	for i := range 60 {
		mustSend(t, q, fmt.Sprint("d", i))
	}
	for range 60 {
		m, ok := tryRecv(t, q)
		if !ok {
			t.Fatal("nothing ready")
		}
		state[m.Offset] = &st{deadline: m.Deadline, receives: 1}
		clock.Advance(time.Duration(rng.IntN(4)) * 100 * time.Millisecond)
	}
	for round := range 150 {
		// The earliest deadline of a message in flight.
		var next time.Time
		for _, s := range state {
			if !s.deleted && (next.IsZero() || s.deadline.Before(next)) {
				next = s.deadline
			}
		}
		if next.IsZero() {
			break
		}
		if d := next.Sub(clock.Now()) - time.Nanosecond; d >= 0 {
			clock.Advance(d)
			if m, ok := tryRecv(t, q); ok {
				t.Fatalf("round %d: offset %d handed out at %v, 1 ns before the earliest deadline %v (its own: %v)",
					round, m.Offset, clock.Now(), next, state[m.Offset].deadline)
			}
			clock.Advance(time.Nanosecond)
		}
		// Every message whose deadline is now due, lowest offset first.
		var due []uint64
		for off, s := range state {
			if !s.deleted && !clock.Now().Before(s.deadline) {
				due = append(due, off)
			}
		}
		slices.Sort(due)
		for _, off := range due {
			m, ok := tryRecv(t, q)
			want := clock.Now().Add(testVisibility)
			if !ok || m.Offset != off || m.Receives != state[off].receives+1 || !m.Deadline.Equal(want) || string(m.Body) != fmt.Sprint("d", off) {
				t.Fatalf("round %d: at the deadline got %v %+v, want offset %d receives %d deadline %v", round, ok, m, off, state[off].receives+1, want)
			}
			state[off].receives++
			state[off].deadline = m.Deadline
			if rng.IntN(4) == 0 {
				mustDelete(t, q, off)
				state[off].deleted = true
			}
			clock.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
	}
	// Blocked receivers are woken by the timer exactly at a deadline.
	var inflight []uint64
	for off, s := range state {
		if !s.deleted {
			inflight = append(inflight, off)
		}
	}
	got := make(chan Message, 100)
	const waiters = 3
	for range waiters {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := q.Receive(ctx)
			if err == nil {
				got <- m
			} else {
				got <- Message{Offset: math.MaxUint64}
			}
		}()
	}
	waitFor(t, "blocked receivers", func() bool { return blockedReceivers(q) == waiters })
	var earliest time.Time
	for _, off := range inflight {
		if d := state[off].deadline; earliest.IsZero() || d.Before(earliest) {
			earliest = d
		}
	}
	clock.Advance(earliest.Sub(clock.Now()) - time.Nanosecond)
	time.Sleep(20 * time.Millisecond)
	if n := blockedReceivers(q); n != waiters {
		t.Fatalf("%d receivers woke 1 ns before the earliest deadline", waiters-n)
	}
	clock.Advance(time.Nanosecond)
	select {
	case m := <-got:
		if m.Offset == math.MaxUint64 || !clock.Now().Add(-testVisibility).Before(m.Deadline) || m.Receives < 2 {
			t.Fatalf("woken receiver got %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no blocked receiver woke at the deadline (timer)")
	}
	q.Close()
	for range waiters - 1 {
		<-got
	}
}

// TestQueueVisibilityLimitsAndDoneContext: Visibility 0 means the default,
// MaxVisibility is accepted and kept, one nanosecond more is refused; a
// Receive with a done context returns its error, hands out nothing and
// changes nothing (not even the expiry of a passed deadline or a timer).
func TestQueueVisibilityLimitsAndDoneContext(t *testing.T) {
	for _, c := range []struct {
		vis, want time.Duration
		ok        bool
	}{
		{0, DefaultVisibility, true}, {1, 1, true}, {MaxVisibility, MaxVisibility, true},
		{MaxVisibility + 1, 0, false}, {-1, 0, false}, {math.MinInt64, 0, false}, {math.MaxInt64, 0, false},
	} {
		clock := newFakeClock()
		q, err := Open(t.TempDir(), Options{Visibility: c.vis, Clock: clock})
		if !c.ok {
			if !errors.Is(err, engine.ErrBadOptions) {
				t.Errorf("Visibility %v: Open = %v, want ErrBadOptions", c.vis, err)
			}
			if q != nil {
				q.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("Visibility %v: %v", c.vis, err)
			continue
		}
		mustSend(t, q, "v")
		m, ok := tryRecv(t, q)
		if !ok || !m.Deadline.Equal(clock.Now().Add(c.want)) {
			t.Errorf("Visibility %v: hand-out %+v, want deadline now + %v", c.vis, m, c.want)
		}
		clock.Advance(c.want - 1)
		if m2, ok := tryRecv(t, q); ok {
			t.Errorf("Visibility %v: handed out again %v before the deadline: %+v", c.vis, time.Duration(1), m2)
		}
		clock.Advance(1)
		if m2, ok := tryRecv(t, q); !ok || m2.Receives != 2 {
			t.Errorf("Visibility %v: not handed out again at the deadline: %v %+v", c.vis, ok, m2)
		}
		q.Close()
	}
	// CheckpointInterval at its extreme is accepted and works.
	q, err := Open(t.TempDir(), Options{CheckpointInterval: math.MaxInt64, Clock: newFakeClock()})
	if err != nil {
		t.Errorf("CheckpointInterval MaxInt64: %v", err)
	} else {
		mustSend(t, q, "x")
		mustCloseQueue(t, q)
	}

	clock := newFakeClock()
	q = openTestQueue(t, t.TempDir(), clock)
	defer q.Close()
	for i := range 3 {
		mustSend(t, q, fmt.Sprint(i))
	}
	tryRecv(t, q)
	clock.Advance(testVisibility) // 0's deadline passed: not yet expired by anyone
	done, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Hour))
	defer cancel2()
	pending := clock.Pending()
	q.mu.Lock()
	inFlight, ready, cursor, recv := q.es.n[stInFlight], q.es.nAgain, q.t.Cursor(), q.counts.received
	q.mu.Unlock()
	for _, ctx := range []context.Context{done, expired} {
		m, err := q.Receive(ctx)
		if err != ctx.Err() || m.Offset != 0 || m.Body != nil || m.Receives != 0 || !m.Deadline.IsZero() {
			t.Errorf("Receive with a done context: %+v, %v; want the zero Message and %v", m, err, ctx.Err())
		}
	}
	q.mu.Lock()
	changed := q.es.n[stInFlight] != inFlight || q.es.nAgain != ready || q.t.Cursor() != cursor || q.counts.received != recv
	q.mu.Unlock()
	if changed || clock.Pending() != pending {
		t.Errorf("a Receive with a done context changed the queue")
	}
	if m, ok := tryRecv(t, q); !ok || m.Offset != 0 || m.Receives != 2 {
		t.Errorf("after the done Receives: %+v", m)
	}
}

// TestQueueDeadlineFarFutureNoOverflow: a ManualClock moved 292 years ahead
// (the limit of a time.Duration since the queue opened). Deadlines are
// nanoseconds since Open: now + Visibility must not overflow into the past,
// which would hand the same message to two receivers at once.
func TestQueueDeadlineFarFutureNoOverflow(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer q.Close()
	mustSend(t, q, "far")
	clock.Advance(math.MaxInt64 - testVisibility/2)
	a, ok := tryRecv(t, q)
	if !ok {
		t.Fatal("nothing handed out")
	}
	if b, ok := tryRecv(t, q); ok {
		t.Fatalf("offset %d handed out twice at once, 292 years after Open (deadlines %v and %v)", b.Offset, a.Deadline, b.Deadline)
	}
}

// ---------------------------------------------------------------------------
// Promise 7: extreme use.

// TestQueueMillionLostSkippedOnOpen: queue.head (durable) says a million
// more offsets were given out than the log holds: a power failure took
// them. Open skips them all, counts them, deletes them with one range
// record, hands out only what the log holds, and gives new messages offsets
// past them; Stat sees the same; a second open finds nothing more lost.
func TestQueueMillionLostSkippedOnOpen(t *testing.T) {
	t.Parallel() // reads deleteSegmentBytes only: runs after the tests that set it
	const lost = 1_000_000
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	for i := range 10 {
		mustSend(t, q, hBody(i))
	}
	mustCloseQueue(t, q)
	if err := os.WriteFile(filepath.Join(dir, headName), encodeHead(headState{head: 3, end: 10 + lost}), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "log.clean"))
	st, err := Stat(dir)
	if err != nil || st.Lost != lost || st.Messages != 7 {
		t.Errorf("Stat: lost %d, messages %d, %v; want %d lost, 7 messages", st.Lost, st.Messages, err, lost)
	}
	start := time.Now()
	q = openTestQueue(t, dir, clock)
	opened := time.Since(start)
	rec := q.Recovery()
	got := hDrain(t, q)
	drained := time.Since(start)
	if rec.Lost != lost || !slices.Equal(hOffsets(got), []uint64{3, 4, 5, 6, 7, 8, 9}) {
		t.Errorf("recovery lost %d, handed out %v", rec.Lost, hOffsets(got))
	}
	if off := mustSend(t, q, "new"); off != 10+lost {
		t.Errorf("new message at %d, want %d", off, 10+lost)
	}
	if m, ok := tryRecv(t, q); !ok || m.Offset != 10+lost || string(m.Body) != "new" {
		t.Errorf("the new message: %v %+v", ok, m)
	}
	for _, off := range []uint64{11, 500_000, 10 + lost - 1} {
		if err := q.Discard(off); err != nil {
			t.Errorf("Discard(%d) of a lost offset: %v", off, err)
		}
		if err := q.Delete(off); err != nil {
			t.Errorf("Delete(%d) of a lost offset: %v", off, err)
		}
	}
	t.Logf("open %v, open and drain %v", opened, drained)
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock)
	defer q.Close()
	if rec := q.Recovery(); rec.Lost != 0 {
		t.Errorf("second open: lost %d", rec.Lost)
	}
	if got := hOffsets(hDrain(t, q)); !slices.Equal(got, []uint64{3, 4, 5, 6, 7, 8, 9, 10 + lost}) {
		t.Errorf("second open handed out %v", got)
	}
}

// TestQueueBodySizeLimits: bodies of 0 bytes and of MaxRecordBytes go through
// Send, Receive, Close and reopen byte for byte; one byte more is refused
// and takes no offset.
func TestQueueBodySizeLimits(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	big := make([]byte, engine.DefaultMaxRecordBytes)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	q := openTestQueue(t, dir, clock, func(o *Options) { o.Log.SegmentBytes = 0 })
	want := map[uint64][]byte{}
	for _, b := range [][]byte{nil, {}, big, {0}, big[:len(big)-1]} {
		off, err := q.Send(b)
		if err != nil {
			t.Fatalf("Send of %d bytes: %v", len(b), err)
		}
		want[off] = b
	}
	if off, err := q.Send(make([]byte, len(big)+1)); !errors.Is(err, engine.ErrTooLarge) {
		t.Fatalf("Send of MaxRecordBytes+1: %d, %v", off, err)
	}
	if off := mustSend(t, q, "after"); off != 5 {
		t.Fatalf("the refused send took an offset: next is %d", off)
	}
	want[5] = []byte("after")
	check := func(when string) {
		for _, m := range drain(t, q) {
			if !bytes.Equal(m.Body, want[m.Offset]) {
				t.Errorf("%s: offset %d: %d bytes, want %d", when, m.Offset, len(m.Body), len(want[m.Offset]))
			}
			if m.Body == nil && when == "first" {
				// A zero-length body is valid to read; nothing to check.
			}
		}
	}
	check("first")
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock)
	defer q.Close()
	check("after reopen")
}

// TestQueueInFlight100k: 100,000 messages in flight at once, all
// expiring together, all handed out again lowest first with Receives 2,
// then deleted.
func TestQueueInFlight100k(t *testing.T) {
	t.Parallel() // reads deleteSegmentBytes only: runs after the tests that set it
	const n = 100_000
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) { o.Log.SegmentBytes = 1 << 20 })
	defer q.Close()
	body := []byte("0123456789abcdef")
	for range n {
		if _, err := q.Send(body); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		m, ok, err := q.TryReceive()
		if !ok || err != nil || m.Offset != uint64(i) {
			t.Fatalf("hand-out %d: %v %v %+v", i, ok, err, m)
		}
	}
	if st := q.Stats(); st.InFlight != n || st.ReadyAgain != 0 {
		t.Fatalf("stats: %+v", st)
	}
	if _, ok, _ := q.TryReceive(); ok {
		t.Fatal("a message handed out twice within its deadline")
	}
	clock.Advance(testVisibility)
	if st := q.Stats(); st.InFlight != 0 || st.ReadyAgain != n {
		t.Fatalf("stats after the deadline: %+v", st)
	}
	const again = 2000 // handed out again, lowest first: checking the first ones suffices
	for i := range again {
		m, ok, err := q.TryReceive()
		if !ok || err != nil || m.Offset != uint64(i) || m.Receives != 2 || !bytes.Equal(m.Body, body) {
			t.Fatalf("second hand-out %d: %v %v %+v", i, ok, err, m)
		}
	}
	if st := q.Stats(); st.InFlight != again || st.ReadyAgain != n-again || st.Received != n+again || st.Redelivered != again {
		t.Fatalf("stats at the end: %+v", st)
	}
}

// TestQueueDeleteOddOffsets: Delete and Discard of offsets never handed out,
// beyond the end, at math.MaxUint64, below the head, twice, and a queue
// whose offsets start near 2^64.
func TestQueueDeleteOddOffsets(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	for i := range 5 {
		mustSend(t, q, fmt.Sprint(i))
	}
	for _, off := range []uint64{0, 4, 5, 1 << 40, math.MaxUint64, math.MaxUint64 - 1} {
		if err := q.Delete(off); !errors.Is(err, ErrNotInFlight) {
			t.Errorf("Delete(%d) never handed out: %v, want ErrNotInFlight", off, err)
		}
	}
	for _, off := range []uint64{5, 6, 1 << 40, math.MaxUint64, math.MaxUint64 - 1} {
		if err := q.Discard(off); !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("Discard(%d) beyond the end: %v, want ErrNotFound", off, err)
		}
	}
	if st := q.Stats(); st.Deleted != 0 || st.Head != 0 || st.Cursor != 0 {
		t.Errorf("refused deletes changed the queue: %+v", st)
	}
	if got := offsetsOf(drain(t, q)); !slices.Equal(got, []uint64{0, 1, 2, 3, 4}) {
		t.Errorf("after refused deletes handed out %v", got)
	}
	for _, off := range []uint64{0, 0, 1, 2, 3, 4, 4} {
		if err := q.Delete(off); err != nil {
			t.Errorf("Delete(%d): %v", off, err)
		}
		if err := q.Discard(off); err != nil {
			t.Errorf("Discard(%d) of a deleted offset: %v", off, err)
		}
	}
	if st := q.Stats(); st.Deleted != 5 || st.Head != 5 {
		t.Errorf("stats: %+v", st)
	}
	mustCloseQueue(t, q)

	// Offsets near the top.
	dir := t.TempDir()
	first := uint64(math.MaxUint64 - 40)
	q = openTestQueue(t, dir, clock, func(o *Options) { o.Log.FirstOffset = first })
	var offs []uint64
	for {
		off, err := q.Send([]byte("top"))
		if errors.Is(err, engine.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
		if len(offs) > 100 {
			t.Fatal("no ErrFull")
		}
	}
	last := offs[len(offs)-1]
	got := drain(t, q)
	if len(got) != len(offs) || got[0].Offset != first || got[len(got)-1].Offset != last {
		t.Fatalf("near 2^64: sent %d (last %d), handed out %d", len(offs), last, len(got))
	}
	for _, m := range got[:len(got)-2] {
		mustDelete(t, q, m.Offset)
	}
	for _, off := range []uint64{last + 1, math.MaxUint64} {
		if err := q.Discard(off); !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("Discard(%d) at the top: %v", off, err)
		}
		if err := q.Delete(off); !errors.Is(err, ErrNotInFlight) {
			t.Errorf("Delete(%d) at the top: %v", off, err)
		}
	}
	if err := q.Discard(last); err != nil {
		t.Errorf("Discard(last): %v", err)
	}
	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock)
	defer q.Close()
	if got := offsetsOf(drain(t, q)); !slices.Equal(got, []uint64{last - 1}) {
		t.Errorf("near 2^64 after reopen: handed out %v, want [%d]", got, last-1)
	}
	if _, err := q.Send([]byte("x")); !errors.Is(err, engine.ErrFull) {
		t.Errorf("Send after reopen at the top: %v, want ErrFull", err)
	}
}

// ---------------------------------------------------------------------------
// queue.Stat beside the README: "head (oldest message not deleted)".

// TestQueueStatHeadWhereOpenStarts: without queue.head, and after every
// message was lost, Stat's head must be where Open starts: the oldest
// message not deleted.
func TestQueueStatHeadWhereOpenStarts(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	for i := range 10 {
		mustSend(t, q, fmt.Sprint(i))
	}
	for _, m := range drain(t, q)[:4] {
		mustDelete(t, q, m.Offset)
	}
	mustCloseQueue(t, q)
	os.Remove(filepath.Join(dir, headName))
	st, err := Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	q = openTestQueue(t, dir, clock)
	rec := q.Recovery()
	mustCloseQueue(t, q)
	if st.Head != rec.Head || st.Head != 4 {
		t.Errorf("without queue.head: Stat head %d, Open's head %d; messages 0..3 are deleted, the oldest not deleted is 4", st.Head, rec.Head)
	}
}

// ---------------------------------------------------------------------------
// Close at random moments, many times.

// TestQueueCloseRacesEveryMethod opens a queue 31 times (6 under
// SyncAlways) and closes it (from two goroutines at once) after a random
// short while, with every method running in loops: each returns ErrClosed
// only once Close began, blocked receivers return, exactly one Close
// returns nil, and nothing panics.
func TestQueueCloseRacesEveryMethod(t *testing.T) {
	t.Parallel() // reads deleteSegmentBytes only: runs after the tests that set it
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 31 {
		policy := engine.SyncNone
		if round >= 25 { // a few under SyncAlways: Send and Delete wait for syncs while Close runs
			policy = engine.SyncAlways
		}
		clock := newFakeClock()
		dir := t.TempDir()
		q := openTestQueue(t, dir, clock, func(o *Options) {
			o.Visibility = time.Second
			o.CheckpointInterval = time.Millisecond
			o.Log.Sync = policy
		})
		var closing atomic.Bool
		var bad atomic.Value
		check := func(what string, err error, ok ...error) bool {
			if err == nil {
				return true
			}
			if errors.Is(err, engine.ErrClosed) {
				if !closing.Load() {
					bad.Store(fmt.Sprintf("round %d: %s returned ErrClosed before Close: %v", round, what, err))
				}
				return false
			}
			for _, e := range ok {
				if errors.Is(err, e) {
					return true
				}
			}
			bad.Store(fmt.Sprintf("round %d: %s: %v", round, what, err))
			return false
		}
		var wg sync.WaitGroup
		run := func(f func() bool) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for f() {
				}
			}()
		}
		run(func() bool { _, err := q.Send([]byte("body")); return check("Send", err) })
		for range 3 {
			run(func() bool {
				m, err := q.Receive(context.Background())
				if !check("Receive", err) {
					return false
				}
				_ = len(m.Body)
				return check("Delete", q.Delete(m.Offset))
			})
		}
		run(func() bool {
			m, ok, err := q.TryReceive()
			if !check("TryReceive", err) {
				return false
			}
			if ok && m.Offset%3 == 0 {
				return check("Discard", q.Discard(m.Offset+1), engine.ErrNotFound)
			}
			return true
		})
		run(func() bool {
			st := q.Stats()
			_ = q.Recovery()
			clock.Advance(time.Duration(st.End%7) * 100 * time.Millisecond)
			return !closing.Load()
		})
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		closing.Store(true)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- q.Close() }()
		}
		e1, e2 := <-errs, <-errs
		if (e1 == nil) == (e2 == nil) || !errors.Is(errors.Join(e1, e2), engine.ErrClosed) {
			t.Errorf("round %d: two Closes returned %v and %v, want nil and ErrClosed", round, e1, e2)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: callers still blocked a minute after Close", round)
		}
		if s, ok := bad.Load().(string); ok {
			t.Error(s)
		}
		if _, err := q.Send(nil); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("Send after Close: %v", err)
		}
		if _, _, err := q.TryReceive(); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("TryReceive after Close: %v", err)
		}
		if err := q.Discard(0); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("Discard after Close: %v", err)
		}
		_ = q.Stats()
		_ = q.Recovery()
	}
}

// ---------------------------------------------------------------------------
// Promise 1 under kill -9 at a random moment, with every method running.

// TestQueueKill9ConcurrentKeepsAcknowledged: a child process sends,
// receives and deletes from 6 goroutines (SyncNone, checkpoints every
// millisecond, short visibilities so that messages come back) and is killed
// with SIGKILL at a random moment. It reports each acknowledged Send ("S
// off i") and each Delete before it is called ("d off") and after it
// returned ("D off"). After the reopen: every acknowledged send that no
// Delete was called for comes back with its body; no message whose Delete
// returned comes back; offsets are never reused.
func TestQueueKill9ConcurrentKeepsAcknowledged(t *testing.T) {
	if dir := os.Getenv("PAGELOG_CONCURRENT_KILL_DIR"); dir != "" {
		hKillChild(dir)
		return
	}
	t.Parallel()
	for round := range 3 {
		dir := t.TempDir()
		cmd := testkit.Child("TestQueueKill9ConcurrentKeepsAcknowledged")
		cmd.Env = append(os.Environ(), "PAGELOG_CONCURRENT_KILL_DIR="+dir)
		var stdout, stderr bytes.Buffer
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it at a random moment once it is busy: after its first 300
		// acknowledged lines (a -race child starts slowly).
		busy, copied := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(copied)
			sc := bufio.NewScanner(pipe)
			n := 0
			for sc.Scan() {
				stdout.WriteString(sc.Text() + "\n")
				if n++; n == 300 {
					close(busy)
				}
			}
			if n < 300 {
				close(busy)
			}
		}()
		select {
		case <-busy:
		case <-time.After(20 * time.Second):
		}
		time.Sleep(time.Duration(rand.IntN(100)+30*round) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		<-copied
		err = cmd.Wait()
		if !testkit.KilledBySIGKILL(err) {
			t.Fatalf("child: %v, want it killed\nstderr: %s", err, hTail(stderr.String(), 20))
		}
		sent := map[uint64]string{}
		deleting, deleted := hSet{}, hSet{}
		var maxOff uint64
		for _, line := range strings.Split(stdout.String(), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			var off uint64
			fmt.Sscan(f[1], &off)
			switch f[0] {
			case "S":
				if _, dup := sent[off]; dup {
					t.Errorf("round %d: offset %d acknowledged for two sends", round, off)
				}
				sent[off] = hKillBody(f[2])
				maxOff = max(maxOff, off)
			case "d":
				deleting[off] = true
			case "D":
				deleted[off] = true
			}
		}
		if len(sent) < 100 || len(deleted) < 10 {
			t.Fatalf("round %d: child did too little: %d sent, %d deleted\nstderr: %s", round, len(sent), len(deleted), hTail(stderr.String(), 20))
		}
		q := openTestQueue(t, dir, newFakeClock())
		rec := q.Recovery()
		seen := hSet{}
		for _, g := range hDrain(t, q) {
			seen[g.off] = true
			want, ok := sent[g.off]
			switch {
			case g.err != nil:
				t.Errorf("round %d: offset %d handed out damaged: %v", round, g.off, g.err)
			case deleted[g.off]:
				t.Errorf("round %d: offset %d handed out, its Delete had returned", round, g.off)
			case ok && g.body != want:
				t.Errorf("round %d: offset %d body %q, sent %q", round, g.off, g.body, want)
			case !ok && !strings.HasPrefix(g.body, "kill-"):
				t.Errorf("round %d: offset %d body %q was never sent", round, g.off, g.body)
			}
		}
		var missing []uint64
		for off := range sent {
			if !seen[off] && !deleting[off] {
				missing = append(missing, off)
			}
		}
		slices.Sort(missing)
		if len(missing) > 0 {
			t.Errorf("round %d: %d acknowledged, never deleted messages missing after kill -9: %v", round, len(missing), missing[:min(len(missing), 20)])
		}
		if off := mustSend(t, q, "after"); off <= maxOff {
			t.Errorf("round %d: a new message took offset %d, acknowledged before the kill", round, off)
		}
		t.Logf("round %d: %d sent, %d deleted, %d handed out after reopen; recovery head %d, %d deletes applied, lost %d",
			round, len(sent), len(deleted), len(seen), rec.Head, rec.DeletesApplied, rec.Lost)
		mustCloseQueue(t, q)
	}
}

func hKillBody(i string) string { return "kill-" + i + "-" + strings.Repeat("k", len(i)*7) }

func hKillChild(dir string) {
	deleteSegmentBytes = 24 * 64
	q, err := Open(dir, Options{
		Log:                engine.Options{SegmentBytes: 8192},
		Visibility:         20 * time.Millisecond,
		CheckpointInterval: time.Millisecond,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		outMu.Lock()
		os.Stdout.WriteString(line) // one write per line: whole lines reach the pipe
		outMu.Unlock()
	}
	var n atomic.Int64
	for range 2 {
		go func() {
			for {
				i := fmt.Sprint(n.Add(1))
				off, err := q.Send([]byte(hKillBody(i)))
				if err != nil {
					fmt.Fprintln(os.Stderr, "send:", err)
					os.Exit(4)
				}
				say("S %d %s\n", off, i)
				if n.Load()%16 == 0 {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	for w := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				m, err := q.Receive(context.Background())
				if err != nil {
					fmt.Fprintln(os.Stderr, "receive:", err)
					os.Exit(5)
				}
				if rng.IntN(10) < 3 {
					continue // comes back after its deadline
				}
				say("d %d\n", m.Offset)
				if err := q.Delete(m.Offset); err != nil {
					fmt.Fprintln(os.Stderr, "delete:", err)
					os.Exit(6)
				}
				say("D %d\n", m.Offset)
			}
		}()
	}
	select {}
}

// TestQueueRealClockTimersWake: with the system clock and short
// visibilities, blocked receivers are woken by the deadline timer (no
// other call needed), never before a deadline, and the head checkpoint
// follows deletes on its own.
func TestQueueRealClockTimersWake(t *testing.T) {
	t.Parallel()
	const vis = 200 * time.Millisecond
	q, err := Open(t.TempDir(), Options{Visibility: vis, CheckpointInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i := range 20 {
		mustSend(t, q, fmt.Sprint("r", i))
	}
	// first holds each message's latest hand-out. On a slow machine a
	// deadline can pass before all 20 are out: the message then comes
	// again, which is right only once its deadline has passed.
	first := map[uint64]Message{}
	for len(first) < 20 {
		m, ok := tryRecv(t, q)
		if !ok {
			continue // all out; one comes back at its deadline
		}
		if f, ok := first[m.Offset]; ok {
			if m.Receives != f.Receives+1 || time.Now().Before(f.Deadline) {
				t.Fatalf("message %d handed out again before its deadline %v: %+v", m.Offset, f.Deadline, m)
			}
		} else if m.Receives != 1 {
			t.Fatalf("first hand-out of %d: %d receives", m.Offset, m.Receives)
		}
		first[m.Offset] = m
	}
	got := make(chan Message, 100)
	for range 5 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for {
				m, err := q.Receive(ctx)
				if err != nil {
					return
				}
				got <- m
				if err := q.Delete(m.Offset); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	seen := hSet{}
	for len(seen) < 20 {
		select {
		case m := <-got:
			seen[m.Offset] = true
			f, ok := first[m.Offset]
			if !ok || m.Receives <= f.Receives || (m.Receives == f.Receives+1 && m.Deadline.Add(-vis).Before(f.Deadline)) || string(m.Body) != fmt.Sprint("r", m.Offset) {
				t.Errorf("redelivery %+v (body %q), first hand-out's deadline %v", m, m.Body, f.Deadline)
			}
		case <-time.After(time.Minute):
			t.Fatal("blocked receivers were not woken by the deadlines")
		}
	}
	deadline := time.Now().Add(time.Minute)
	for q.Stats().Checkpointed != 20 {
		if time.Now().After(deadline) {
			t.Fatalf("the head checkpoint did not follow the deletes: %+v", q.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestQueueStatBesideOwnerNoFalseLoss: Stat reads a queue while its owner
// sends, receives and deletes, with head checkpoints every millisecond
// dropping segments. Nothing is lost or damaged, so Stat must never report
// lost offsets, damaged delete records or a checkpoint error, nor a head
// beyond the end (pagelog verify calls a queue with lost offsets "NOT
// healthy").
func TestQueueStatBesideOwnerNoFalseLoss(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q, err := Open(dir, Options{Log: engine.Options{SegmentBytes: 8 << 10}, CheckpointInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := []byte(strings.Repeat("o", 40))
		for {
			select {
			case <-stop:
				return
			default:
			}
			for range 32 {
				if _, err := q.Send(body); err != nil {
					t.Error(err)
					return
				}
			}
			for range 32 {
				m, ok, err := q.TryReceive()
				if err != nil || !ok {
					t.Error(ok, err)
					return
				}
				if err := q.Delete(m.Offset); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	var bad []string
	n := 0
	for start := time.Now(); time.Since(start) < time.Second && len(bad) < 5; n++ {
		st, err := Stat(dir)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("Stat: %v", err))
		case st.Lost != 0 || len(st.DeleteDamage) != 0 || st.CheckpointError != nil || st.Head > st.End:
			bad = append(bad, fmt.Sprintf("Stat beside the owner: end %d, head %d, lost %d, checkpointed head %d end %d, damage %q, checkpoint error %v",
				st.End, st.Head, st.Lost, st.Checkpointed, st.CheckpointEnd, st.DeleteDamage, st.CheckpointError))
		}
	}
	close(stop)
	<-done
	if err := q.Close(); err != nil {
		t.Error(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d Stats beside the owner", n)
}

// A directory in place of the delete log's segment file, which the log
// would create again: Open says what is in the way.
func TestOpenWithADirectoryInPlaceOfADeleteSegmentSaysSo(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustSend(t, q, "x")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "deletes", "00000000000000000000.log")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "is a directory, not a regular file") {
		t.Fatalf("Open = %v, want an error saying a directory is in the segment's place", err)
	}
}
