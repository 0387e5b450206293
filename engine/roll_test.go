package engine

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/mmapfile"
)

// diskBytes is how much disk the regular files of dir take.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		n += testkit.DiskBytes(st)
	}
	return n
}

// A new log takes disk as it fills, not SegmentBytes up front.
func TestNewLogAllocatesInSteps(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	defer l.Close()
	for i := range 3 {
		if _, err := l.Append(testBody(uint64(i), 100)); err != nil {
			t.Fatal(err)
		}
	}
	// The prefaulter allocates ahead of the writer (8 MiB at most).
	time.Sleep(50 * time.Millisecond)
	if n := diskBytes(t, dir); n > 12<<20 {
		t.Fatalf("a log of three records takes %d bytes of disk, want well under the %d of a segment", n, DefaultSegmentBytes)
	}
	// Appending on allocates on: a record never lands past the file's end.
	body := make([]byte, 64<<10)
	for range 400 { // 25 MiB
		if _, err := l.Append(body); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
}

// A full disk in the middle of a segment (its next allocation step) fails
// the append that needs it, writes nothing, and appends go on once there is
// space again.
func TestFullDiskInsideSegment(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	opts := Options{}
	opts.allocate = func(f *os.File, off, n int64) error {
		if full.Load() && strings.HasSuffix(f.Name(), segment.LogSuffix) {
			return syscall.ENOSPC
		}
		return mmapfile.Allocate(f, off, n)
	}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	body := make([]byte, 32<<10)
	full.Store(true)
	var acked uint64
	var err error
	for i := 0; i < 2048 && err == nil; i++ { // up to 64 MiB: past every step allocated so far
		_, err = l.Append(body)
		if err == nil {
			acked++
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("appending with the disk full: %v after %d appends, want ENOSPC", err, acked)
	}
	if l.Next() != acked {
		t.Fatalf("Next = %d after a failed append, want %d", l.Next(), acked)
	}
	full.Store(false)
	if off, err := l.Append(body); err != nil || off != acked {
		t.Fatalf("Append once there is space: %d, %v; want %d", off, err, acked)
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
}

// The prepared next segment is not part of the log: readers ignore its
// files, Close removes them, and a writable open removes those a crash
// left behind.
func TestPreparedSegmentFiles(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 64 << 10
	l := mustOpen(t, dir, Options{SegmentBytes: segBytes})
	sizes := appendN(t, l, 40, func(uint64) int { return 1000 }) // past half the segment
	prepared := filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(prepared); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no segment was prepared past half of the active one")
		}
		time.Sleep(time.Millisecond)
	}
	ro := mustOpenRO(t, dir, Options{})
	if ro.Next() != l.Next() {
		t.Fatalf("read-only Next = %d, want %d", ro.Next(), l.Next())
	}
	if rep, err := ro.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("read-only Verify beside a prepared segment: %v %+v", err, rep)
	}
	ro.Close()
	// Rolls take the prepared segment: the log reads back whole.
	sizes = append(sizes, appendN(t, l, 200, func(uint64) int { return 1000 })...)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(prepared); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the prepared segment behind: %v", err)
	}
	checkLayout(t, dir, 0, sizes, segBytes)

	// Leftovers of a crash: removed by a writable open, and noted.
	for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
		if err := os.WriteFile(filepath.Join(dir, segment.PreparedPrefix+suffix), make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	if _, err := os.Stat(prepared); !errors.Is(err, os.ErrNotExist) && l.Recovery().Notes == nil {
		t.Fatalf("a writable open kept a leftover prepared segment")
	}
	found := false
	for _, n := range l.Recovery().Notes {
		found = found || strings.Contains(n, segment.PreparedPrefix)
	}
	if !found {
		t.Fatalf("the removal of the leftover prepared segment is not in the report: %q", l.Recovery().Notes)
	}
	checkAll(t, l, 0, sizes)
}

// A prepared segment whose files were replaced behind the log's back is not
// activated: the roll creates a segment instead, and nothing is lost.
func TestPreparedSegmentReplaced(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 64 << 10
	l := mustOpen(t, dir, Options{SegmentBytes: segBytes})
	defer l.Close()
	sizes := appendN(t, l, 40, func(uint64) int { return 1000 })
	prepared := filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)
	deadline := time.Now().Add(time.Minute)
	for {
		l.rolls.mu.Lock()
		ready := l.rolls.prepared != nil
		l.rolls.mu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no segment was prepared")
		}
		time.Sleep(time.Millisecond)
	}
	if err := os.Remove(prepared); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prepared, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	sizes = append(sizes, appendN(t, l, 100, func(uint64) int { return 1000 })...)
	checkAll(t, l, 0, sizes)
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
}

// blockNaming makes the goroutine of the log's next rolls wait before it
// names the index files of the segment the roll took: entered receives once
// it waits, and release lets it (and later ones) go. The log is let go and
// closed when the test ends, failed or not.
func blockNaming(t *testing.T, l *Log) (entered <-chan struct{}, release func()) {
	in := make(chan struct{}, 1)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	l.rolls.beforeNaming = func() {
		select {
		case in <- struct{}{}:
		default:
		}
		<-gate
	}
	t.Cleanup(func() {
		release()
		_ = l.Close()
	})
	return in, release
}

// rollOntoPrepared appends 1000-byte records to a log of segBytes segments
// until the preparer offers a segment, then until the log rolls onto it. It
// returns the sizes appended and the new segment's base.
func rollOntoPrepared(t *testing.T, l *Log) ([]int, uint64) {
	t.Helper()
	var sizes []int
	size := func(uint64) int { return 1000 }
	for l.active.End() < l.cfg.SegmentBytes/2+2000 {
		sizes = append(sizes, appendN(t, l, 1, size)...)
	}
	waitPreparedOffered(t, l)
	base := l.active.Base()
	for l.active.Base() == base {
		sizes = append(sizes, appendN(t, l, 1, size)...)
	}
	return sizes, l.active.Base()
}

// A roll names only the new segment's .log under the append lock: the
// appends that follow go on while its index files still have their
// prepared names, and the roll's goroutine names them after. A crash in
// between leaves the segment's .log beside prepared index files that hold
// its entries: an open removes them, rebuilds the index from the log and
// loses nothing.
func TestRollAppendsBeforeIndexFilesNamed(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 512}
	l := mustOpen(t, dir, opts)
	entered, release := blockNaming(t, l)
	sizes, base := rollOntoPrepared(t, l)
	// Past several index entries of the new segment, into the mappings
	// of its unnamed index files.
	sizes = append(sizes, appendN(t, l, 20, func(uint64) int { return 1000 })...)
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the roll's goroutine never came to naming the index files")
	}
	name := func(suffix string) string { return filepath.Join(dir, segment.Name(base, suffix)) }
	prepared := func(suffix string) string { return filepath.Join(dir, segment.PreparedPrefix+suffix) }
	if _, err := os.Stat(name(segment.LogSuffix)); err != nil {
		t.Fatalf("the new segment's .log is not named: %v", err)
	}
	for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		if _, err := os.Stat(name(suffix)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s named before the roll's goroutine named it (%v): the roll renamed it under the append lock", name(suffix), err)
		}
		if _, err := os.Stat(prepared(suffix)); err != nil {
			t.Fatalf("the new segment's %s is not under its prepared name: %v", suffix, err)
		}
	}
	checkAll(t, l, 0, sizes)
	ro := mustOpenRO(t, dir, Options{})
	if rep, err := ro.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("read-only Verify before the index files are named: %v %+v", err, rep)
	}
	ro.Close()

	// A crash now: the files as they are.
	cdir := t.TempDir()
	testkit.MustCopyDir(t, dir, cdir, false)
	c := mustOpen(t, cdir, opts)
	notes := strings.Join(c.Recovery().Notes, "; ")
	for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		if _, err := os.Stat(filepath.Join(cdir, segment.PreparedPrefix+suffix)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the open after the crash kept %s (%v)", segment.PreparedPrefix+suffix, err)
		}
		if !strings.Contains(notes, segment.PreparedPrefix+suffix) {
			t.Fatalf("the removal of %s is not in the report: %q", segment.PreparedPrefix+suffix, notes)
		}
	}
	checkAll(t, c, 0, sizes)
	if rep, err := c.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify after the crash: %v %+v", err, rep)
	}
	if n, err := c.OffsetForTime(time.Now().Add(time.Hour)); err != nil || n != c.Next() {
		t.Fatalf("OffsetForTime after the crash: %d, %v; want %d", n, err, c.Next())
	}
	sizes2 := append(sizes, appendN(t, c, 100, func(uint64) int { return 1000 })...) // rolls again
	checkAll(t, c, 0, sizes2)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// Let the naming go: the files get their names, the next roll goes
	// on, and the log reopens clean.
	release()
	sizes = append(sizes, appendN(t, l, 100, func(uint64) int { return 1000 })...)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		if _, err := os.Stat(name(suffix)); err != nil {
			t.Fatalf("the index file was never named: %v", err)
		}
	}
	l2 := mustOpen(t, dir, opts)
	defer l2.Close()
	if rec := l2.Recovery(); !rec.Clean || len(rec.Notes) > 0 || rec.IndexesRebuilt > 0 {
		t.Fatalf("the reopen after Close found %+v", rec)
	}
	checkAll(t, l2, 0, sizes)
}

// preparedSegment returns the segment on offer to the next roll.
func preparedSegment(l *Log) *segment.Segment {
	l.rolls.mu.Lock()
	defer l.rolls.mu.Unlock()
	return l.rolls.prepared
}

// waitPreparedOffered waits until the preparer offers a segment.
func waitPreparedOffered(t *testing.T, l *Log) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); preparedSegment(l) == nil; runtime.Gosched() {
		// The writer idle for idleAfter (a test's checks of its records
		// took that long on a loaded machine), the prefaulter's settle
		// removes the prepared segment, and may do so after the kick of
		// the writer's crossing found it there: the prefaulter kicks the
		// preparer again only once it measures the writer fast, which a
		// writer of one big record now and then never is. Kick it as the
		// prefaulter would.
		if l.rolls.deferred.CompareAndSwap(true, false) {
			select {
			case l.rolls.kick <- struct{}{}:
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no segment was offered in a minute past half of the active one")
		}
	}
}
