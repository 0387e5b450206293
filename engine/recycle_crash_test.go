//go:build linux

package engine

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// TestRecycleCrashProcessKill kills, with SIGKILL at random moments, a
// process that appends to a log reusing dropped segment files, and drops
// its oldest segments every few rolls, so that the kill lands in a drop, a
// rename to the recycled name, a PrepareRecycled (rename, zeroing of the
// head on disk, zeroing of the rest through the mapping) or an activation
// as well as in an append. The page cache survives the kill, so after each
// one: Open succeeds, every record from First on that was acknowledged is
// read back byte for byte (First never passes the lowest offset a drop was
// asked to keep), Verify finds nothing wrong, no recycled-* or prepared.*
// file is left, and appends go on at Next with only zeros after them.
func TestRecycleCrashProcessKill(t *testing.T) {
	seed := crashSeedFor(t)
	rng := crashRand(seed, 7)
	dir := t.TempDir()
	rounds := max(*crashRounds/2, 10)
	var (
		writers          []crashWriter
		start, first     uint64
		acks, cuts, reus int
	)
	want := func(off uint64) []byte { return crashBody(off, crashSaltAt(writers, off), 8, 2008) }
	for round := range rounds {
		salt := uint64(round)*2 + 1
		writers = append(writers, crashWriter{start: start, salt: salt})
		spare := 1 + rng.IntN(3)
		maxAcks := 300 + rng.IntN(1500)
		afterAcks, delay := -1, time.Duration(0)
		if rng.IntN(2) == 0 {
			afterAcks = rng.IntN(maxAcks + 1)
		} else {
			delay = time.Duration(rng.IntN(400_000)) * time.Microsecond
		}
		res, dropAsked, reused := recycleRunChild(t, dir, salt, spare, maxAcks, afterAcks, delay)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("round %d (spare %d, kill after %d acks / %v, seed %d): %s\nchild stderr:\n%s",
				round, spare, afterAcks, delay, seed, fmt.Sprintf(format, args...), res.stderr)
		}
		if res.err != "" {
			fail("the child failed: %s", res.err)
		}
		if !res.beforeOpen && res.next != start {
			fail("the child opened at Next %d; the last Close left %d", res.next, start)
		}
		for i, off := range res.acks {
			if off != start+uint64(i) {
				fail("acknowledgement %d is offset %d, want %d", i, off, start+uint64(i))
			}
		}
		acks += len(res.acks)

		l, err := Open(dir, recycleCrashOptions(spare))
		if err != nil {
			fail("Open after the kill: %v", err)
		}
		if left := append(recycledFiles(t, dir), preparedFiles(t, dir)...); len(left) > 0 {
			_ = l.Close()
			fail("files kept for reuse left after the open: %v (notes %q)", left, l.Recovery().Notes)
		}
		rec := l.Recovery()
		next := l.Next()
		switch {
		case next < start+uint64(len(res.acks)):
			fail("Next %d after %d acknowledged appends from %d: acknowledged records lost (recovery %+v)",
				next, len(res.acks), start, rec.Active)
		case len(rec.Active.Damaged) > 0:
			fail("recovery reports damage after a process kill: %+v", rec.Active)
		case l.First() < first:
			fail("First went back from %d to %d", first, l.First())
		case dropAsked == 0 && l.First() != first:
			fail("First moved from %d to %d without a drop", first, l.First())
		case dropAsked > 0 && l.First() > dropAsked:
			fail("First is %d; no drop asked past %d: records dropped that were to be kept", l.First(), dropAsked)
		}
		first = l.First()
		if msg := crashCheckRange(l, first, next, want); msg != "" {
			fail("%s (recovery %+v)", msg, rec.Active)
		}
		v, err := l.Verify(nil)
		if err != nil || !v.Healthy() || v.Records != next-first {
			fail("Verify: %v, %d records of [%d, %d), problems %q %q, first damage %+v",
				err, v.Records, first, next, v.Problems, v.IndexProblems, v.FirstDamage)
		}
		if rec.Active.Cut {
			cuts++
		}
		writers = append(writers, crashWriter{start: next, salt: salt + 1})
		off, err := l.Append(want(next))
		if err != nil || off != next {
			fail("Append after recovery: offset %d, %v; want %d", off, err, next)
		}
		if msg := crashCheckRange(l, off, off+1, want); msg != "" {
			fail("reading back the append after recovery: %s", msg)
		}
		end, path := l.active.End(), l.active.Path()
		if err := l.Close(); err != nil {
			fail("Close: %v", err)
		}
		if b, err := os.ReadFile(path); err != nil || !testkit.AllZero(b[min(end, int64(len(b))):]) {
			fail("bytes past the end (%d) of %s are not all zero after recovery and an append (%v)", end, path, err)
		}
		if left := append(recycledFiles(t, dir), preparedFiles(t, dir)...); len(left) > 0 {
			fail("files kept for reuse left after Close: %v", left)
		}
		reus += reused
		start = next + 1
	}
	t.Logf("%d rounds: %d acknowledged records checked, %d torn tails cut, %d segments reused (as the children reported last), %d records in all",
		rounds, acks, cuts, reus, start)
	if reus == 0 {
		t.Fatal("no child made a segment from a reused file: the kills never came beside a reuse")
	}
}

func recycleCrashOptions(spare int) Options {
	o := crashKillOptions(SyncNone)
	o.RecycleSegments = spare
	return o
}

// Environment of TestRecycleCrashChild.
const (
	recycleEnvDir   = "PAGELOG_RECYCLE_CRASH_DIR"
	recycleEnvSalt  = "PAGELOG_RECYCLE_CRASH_SALT"
	recycleEnvSpare = "PAGELOG_RECYCLE_CRASH_SPARE"
	recycleEnvMax   = "PAGELOG_RECYCLE_CRASH_MAX"
)

// recycleRunChild runs TestRecycleCrashChild on dir and kills it after
// afterAcks acknowledgements (when >= 0) or delay after its open. It
// returns what the child reported and the highest offset it asked a drop
// to keep (0: none), and the segments it made from reused files.
func recycleRunChild(t *testing.T, dir string, salt uint64, spare, maxAcks, afterAcks int, delay time.Duration) (crashChildResult, uint64, int) {
	t.Helper()
	cmd := testkit.Child("TestRecycleCrashChild")
	cmd.Env = append(os.Environ(),
		recycleEnvDir+"="+dir,
		recycleEnvSalt+"="+strconv.FormatUint(salt, 10),
		recycleEnvSpare+"="+strconv.Itoa(spare),
		recycleEnvMax+"="+strconv.Itoa(maxAcks))
	out, stderr := testkit.StartChild(t, cmd)
	res := crashChildResult{beforeOpen: true}
	var dropAsked uint64
	reused := 0
	var once sync.Once
	kill := func() { once.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL) }) }
	hang := time.AfterFunc(2*time.Minute, kill)
	defer hang.Stop()
	var timer *time.Timer
	for line := range testkit.Lines(out, 256) { // a line cut short by the kill is no acknowledgement
		crashParseLine(line, &res)
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "D":
			n, _ := strconv.ParseUint(f[1], 10, 64)
			dropAsked = max(dropAsked, n)
		case len(f) == 2 && f[0] == "R":
			reused, _ = strconv.Atoi(f[1])
		case f[0] == "O" && afterAcks == 0:
			kill()
		case f[0] == "O" && afterAcks < 0:
			timer = time.AfterFunc(delay, kill)
		case f[0] == "A" && afterAcks > 0 && len(res.acks) >= afterAcks:
			kill()
		}
	}
	if timer != nil {
		timer.Stop()
	}
	kill() // a child that finished its appends waits to be killed
	_ = cmd.Wait()
	res.stderr = stderr.String()
	return res, dropAsked, reused
}

// TestRecycleCrashChild is the child of TestRecycleCrashProcessKill: it
// does nothing unless started by it. It prints "O <next>", then appends
// records (printing "A <offset>" for each, from a second goroutine so that
// the appends run back to back), and every one to three rolls prints
// "D <offset>" and drops the segments below offset, keeping about two
// segments of records. "R <n>" reports the segments made from reused files.
func TestRecycleCrashChild(t *testing.T) {
	dir := os.Getenv(recycleEnvDir)
	if dir == "" {
		return
	}
	var outMu = make(chan struct{}, 1)
	say := func(format string, args ...any) {
		outMu <- struct{}{}
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		<-outMu
	}
	die := func(format string, args ...any) {
		say("E "+format, args...)
		os.Exit(2)
	}
	salt, err1 := strconv.ParseUint(os.Getenv(recycleEnvSalt), 10, 64)
	spare, err2 := strconv.Atoi(os.Getenv(recycleEnvSpare))
	maxAcks, err3 := strconv.Atoi(os.Getenv(recycleEnvMax))
	if err1 != nil || err2 != nil || err3 != nil {
		die("settings: %v %v %v", err1, err2, err3)
	}
	l, err := Open(dir, recycleCrashOptions(spare))
	if err != nil {
		die("Open: %v", err)
	}
	say("O %d", l.Next())
	acks := make(chan uint64, 64)
	done := make(chan struct{})
	go func() {
		for off := range acks {
			say("A %d", off)
		}
		close(done)
	}()
	activeBase := func() uint64 { segs := *l.segs.Load(); return segs[len(segs)-1].Base() }
	base, rolls, every := activeBase(), 0, 1+int(salt%3)
	var reused uint64
	for range maxAcks {
		want := l.Next()
		off, err := l.Append(crashBody(want, salt, 8, 2008))
		if err != nil || off != want {
			die("Append: offset %d, %v; want %d", off, err, want)
		}
		acks <- off
		if b := activeBase(); b != base {
			base = b
			if rolls++; rolls%every == 0 {
				keep := b - min(b, 100)
				say("D %d", keep)
				if _, err := l.DropBefore(keep); err != nil {
					die("DropBefore(%d): %v", keep, err)
				}
			}
			if st := l.Stats(); st.Recycled != reused {
				reused = st.Recycled
				say("R %d", reused)
			}
		}
	}
	close(acks)
	<-done
	time.Sleep(2 * time.Minute)
	die("not killed")
}

// TestRecycleWithRetentionBytes: retention drops through the same path as
// DropBefore, so its dropped files are reused too. Under a steady load,
// with a reader holding a record now and then (its file is reused only
// after the Release) and a reopen in the middle: appends never fail, the
// disk the directory takes stays within the
// retained segments, the active one and RecycleSegments spare files (the
// prepared segment is one of them), every record from First on reads back,
// and dropped files are in fact reused. Retention passes run after each
// append as well as in the background.
func TestRecycleWithRetentionBytes(t *testing.T) {
	const segBytes = 64 << 10
	run := func(spare int) (peak int64, reused uint64) {
		dir := t.TempDir()
		o := Options{SegmentBytes: segBytes, RetentionBytes: 4 * segBytes, RecycleSegments: spare}
		l := mustOpen(t, dir, o)
		defer func() { _ = l.Close() }()
		var held *Record
		for i := range 6000 { // about 6 MiB: 90 segments' worth
			if i == 3000 {
				reused += l.Stats().Recycled
				if held != nil {
					held.Release()
					held = nil
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				if left := recycledFiles(t, dir); len(left) > 0 {
					t.Fatalf("Close left %v", left)
				}
				l = mustOpen(t, dir, o)
			}
			off, err := l.Append(testBody(l.Next(), mixedSize(uint64(i))))
			if err != nil {
				t.Fatalf("spare %d: Append %d: %v", spare, i, err)
			}
			switch i % 500 {
			case 0:
				r, err := l.Read(off)
				if err != nil {
					t.Fatal(err)
				}
				held = &r
			case 300:
				if !bytes.Equal(held.Body, testBody(held.Offset, mixedSize(uint64(i-300)))) {
					t.Fatalf("spare %d: a record held across drops changed", spare)
				}
				held.Release()
				held = nil
			}
			// The retention goroutine lags behind the appends by a
			// scheduler's whim; passes run here too make the peak a
			// property of the log, not of the timing.
			for {
				if n, err := l.retain(); err != nil || n == 0 {
					break
				}
			}
			if i%4 == 0 {
				peak = max(peak, diskBytes(t, dir))
			}
		}
		st := l.Stats()
		reused += st.Recycled
		if st.First == 0 {
			t.Fatalf("spare %d: nothing dropped", spare)
		}
		for off := st.First; off < st.Next; off++ {
			r, err := l.Read(off)
			if err != nil {
				t.Fatalf("spare %d: Read(%d) in [%d, %d): %v", spare, off, st.First, st.Next, err)
			}
			r.Release()
		}
		v, err := l.Verify(nil)
		if err != nil || !v.Healthy() || v.Records != st.Next-st.First {
			t.Fatalf("spare %d: Verify %v: %d records of %d, %q %q", spare, err, v.Records, st.Next-st.First, v.Problems, v.IndexProblems)
		}
		return peak, reused
	}
	for _, spare := range []int{0, 1, 3} {
		peak, reused := run(spare)
		t.Logf("RecycleSegments %d: peak %d bytes on disk, %d segments from reused files", spare, peak, reused)
		if spare > 0 && reused == 0 {
			t.Fatalf("RecycleSegments %d: no dropped file reused", spare)
		}
		// Retained segments, the active one, the spare files (the
		// prepared segment is one; a log without reuse has it too), and
		// a block for each index file and log.meta and log.notify.
		if bound := 4*segBytes + int64(1+max(spare, 1))*segBytes + 64<<10; peak > bound {
			t.Fatalf("RecycleSegments %d: the directory took %d bytes, bound %d", spare, peak, bound)
		}
	}
}

// TestRecycleLeftoversVerifyAndRecover: a copy of a running log's files (a
// process crash: the page cache as it is) with a dropped file kept for
// reuse, a prepared segment made from a reused file and an active segment
// that is a reused file. A read-only open and Verify (what `pagelog
// verify` does) find it healthy and count no leftover as a segment;
// Recover removes the leftovers, finds nothing to repair or cut, and every
// record reads back; appends go on at Next.
func TestRecycleLeftoversVerifyAndRecover(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 64 << 10, RecycleSegments: 2}
	l := mustOpen(t, dir, o)
	defer l.Close()
	body := func(off uint64) []byte { return testBody(off, 500+int(off%7)*100) }
	appendTill := func(done func() bool) {
		t.Helper()
		for i := 0; !done(); i++ {
			if i > 100_000 {
				t.Fatal("never got there")
			}
			if _, err := l.Append(body(l.Next())); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Drops until the active segment is a reused file.
	for round := 0; l.Stats().Recycled < 2; round++ {
		base := l.active.Base()
		appendTill(func() bool { return l.active.Base() != base })
		if _, err := l.DropBefore(l.active.Base()); err != nil {
			t.Fatal(err)
		}
	}
	reused := l.Stats().Recycled
	base := l.active.Base()
	appendTill(func() bool { return l.active.Base() != base })
	if l.Stats().Recycled == reused {
		// The roll took a new file: one more round.
		base = l.active.Base()
		appendTill(func() bool { return l.active.Base() != base })
	}
	// A prepared segment from a reused file, and one more dropped file
	// kept: drop now, then fill past half a segment.
	if _, err := l.DropBefore(l.active.Base()); err != nil {
		t.Fatal(err)
	}
	half := l.active.Base()
	appendTill(func() bool { return l.active.End() > o.SegmentBytes*3/4 && l.active.Base() == half })
	deadline := time.Now().Add(time.Minute)
	for len(preparedFiles(t, dir)) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// Two sealed segments, so that a drop leaves one recycled file
	// waiting. When the segment prepared at that moment is a new file
	// (the preparer found no kept file when it ran), the kept file takes
	// its place and none waits: then one more round.
	var first, next uint64
	var crash string
	var kept []string
	for round := 0; ; round++ {
		if round == 20 {
			t.Fatal("no drop left a recycled file waiting in 20 rounds")
		}
		base = l.active.Base()
		appendTill(func() bool { return l.active.Base() != base })
		base = l.active.Base()
		appendTill(func() bool { return l.active.Base() != base && l.active.End() > 0 })
		if _, err := l.DropBefore(l.active.Base() - 1); err != nil {
			t.Fatal(err)
		}
		first, next = l.First(), l.Next()
		crash = t.TempDir()
		quietCopyFiles(t, l, crash)
		kept = append(recycledFiles(t, crash), preparedFiles(t, crash)...)
		t.Logf("round %d: copied with %v; %d segments from reused files; [%d, %d)", round, kept, l.Stats().Recycled, first, next)
		if len(recycledFiles(t, crash)) > 0 {
			break
		}
	}

	ro := mustOpenRO(t, crash, Options{})
	v, err := ro.Verify(nil)
	if err != nil || !v.Healthy() || v.Records != next-first || ro.First() != first || ro.Next() != next {
		t.Fatalf("read-only Verify: %v, healthy %v, %d records in [%d, %d), want [%d, %d); %q %q",
			err, v.Healthy(), v.Records, ro.First(), ro.Next(), first, next, v.Problems, v.IndexProblems)
	}
	_ = ro.Close()
	if left := append(recycledFiles(t, crash), preparedFiles(t, crash)...); len(left) != len(kept) {
		t.Fatalf("a read-only open removed files: %v left of %v", left, kept)
	}

	rep, err := Recover(crash, Options{RecycleSegments: 2}, RecoverOptions{})
	if err != nil || rep.Damage != nil || !rep.After.Healthy() || rep.After.Records != next-first || len(rep.Renamed) > 0 {
		t.Fatalf("Recover: %v, damage %+v, after %+v, renamed %v", err, rep.Damage, rep.After, rep.Renamed)
	}
	if left := append(recycledFiles(t, crash), preparedFiles(t, crash)...); len(left) > 0 {
		t.Fatalf("Recover left %v", left)
	}
	l2 := mustOpen(t, crash, o)
	defer l2.Close()
	for off := first; off < next; off++ {
		r, err := l2.Read(off)
		if err != nil || !bytes.Equal(r.Body, body(off)) {
			t.Fatalf("Read(%d) after Recover: %v", off, err)
		}
		r.Release()
	}
	if off, err := l2.Append(body(next)); err != nil || off != next {
		t.Fatalf("Append after Recover: %d, %v; want %d", off, err, next)
	}
}
