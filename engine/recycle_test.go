package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// recycledFiles lists the dropped segment files kept for reuse in dir.
func recycledFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), recycledPrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// preparedFiles lists the prepared segment's .log in dir.
func preparedFiles(t *testing.T, dir string) []string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)); err == nil {
		return []string{segment.PreparedPrefix + segment.LogSuffix}
	}
	return nil
}

// With RecycleSegments 1 the log never takes more files than without
// reuse: the kept files and the prepared segment together are at most one,
// whenever the drops come.
func TestRecycleOneSpareFile(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 64 << 10, RecycleSegments: 1}
	l := mustOpen(t, dir, o)
	defer l.Close()
	const size = 1000
	perSeg := uint64((64 << 10) / (size + 16))
	for round := range 40 {
		for range perSeg / 3 {
			if _, err := l.Append(testBody(l.Next(), size)); err != nil {
				t.Fatal(err)
			}
		}
		if round%4 == 3 { // every 4/3 of a segment: at every phase of its fill
			if _, err := l.DropBefore(l.Next()); err != nil {
				t.Fatal(err)
			}
		}
		l.admitRecycled(func(spare int) bool {
			if n := len(l.recycle.paths) + spare; n > 1 {
				t.Errorf("round %d: %d spare files (%v and %d prepared), RecycleSegments 1", round, n, l.recycle.paths, spare)
			}
			return false
		})
	}
	// A drop while nothing is prepared (the active segment not half full
	// yet) keeps its file, and the next segment is made from it.
	before := l.Stats().Recycled
	rollNow := func() {
		for base := l.active.Base(); l.active.Base() == base; {
			if _, err := l.Append(testBody(l.Next(), size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// With segments this small the preparer may finish after the roll it
	// was meant for: roll until a roll took the prepared segment.
	nothingPrepared := func() bool {
		time.Sleep(time.Millisecond)
		return l.admitRecycled(func(spare int) bool { return spare == 0 })
	}
	for tries := 0; ; tries++ {
		rollNow()
		if nothingPrepared() {
			break
		}
		if tries == 1000 {
			t.Fatal("a prepared segment after each of 1000 rolls")
		}
	}
	if _, err := l.DropBefore(l.Next()); err != nil {
		t.Fatal(err)
	}
	rollNow()
	waitFor(t, "the next segment made from the dropped file", func() bool { return l.Stats().Recycled > before })
	waitFor(t, "the preparer to finish", func() bool {
		return l.admitRecycled(func(int) bool { return !l.rolls.preparing })
	})
	if spare := len(recycledFiles(t, dir)) + len(preparedFiles(t, dir)); spare > 1 {
		t.Fatalf("%d spare files in the directory: %v, %v", spare, recycledFiles(t, dir), preparedFiles(t, dir))
	}
}

// Dropped segment files are reused for the next segments: every record
// reads back, the log reopens clean with nothing cut, Verify finds nothing,
// and a reused file never becomes shorter than it was.
func TestRecycleReusesDroppedFiles(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 64 << 10, RecycleSegments: 3}
	l := mustOpen(t, dir, o)
	const size = 1000
	n := uint64(0)
	appendTo := func(upto uint64) {
		for ; n < upto; n++ {
			if _, err := l.Append(testBody(n, size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	perSeg := uint64((64 << 10) / (size + 16))
	appendTo(6 * perSeg)
	var dropped []int64
	for _, s := range *l.segs.Load() {
		if len(dropped) < 3 {
			dropped = append(dropped, s.DiskBytes())
		}
	}
	first := (*l.segs.Load())[3].Base()
	if k, err := l.DropBefore(first); err != nil || k != 3 {
		t.Fatalf("DropBefore: %d, %v", k, err)
	}
	// Kept under the recycled name, or taken already by the preparer
	// (which may be making the next segment from one right now); the
	// prepared segment counts as a spare file.
	waitFor(t, "the dropped files to be kept or reused", func() bool {
		return len(recycledFiles(t, dir))+int(l.Stats().Recycled) >= 2
	})
	// A prepared segment made as a new file gives way to a kept one: until
	// the preparer has removed it, it is one file more.
	waitFor(t, "a new prepared file to give way to a kept one", func() bool {
		return l.admitRecycled(func(int) bool {
			return !l.rolls.preparing && (!l.rolls.fresh || l.rolls.prepared == nil || len(l.recycle.paths) == 0)
		})
	})
	if spare := len(recycledFiles(t, dir)) + len(preparedFiles(t, dir)); spare > o.RecycleSegments {
		t.Fatalf("%d spare files, RecycleSegments %d", spare, o.RecycleSegments)
	}
	appendTo(14 * perSeg)
	st := l.Stats()
	if st.Recycled < 1 {
		t.Fatalf("Stats: %d segments made from dropped files (want at least 1), %d waiting", st.Recycled, st.RecycledWaiting)
	}
	for off := first; off < n; off++ {
		checkRead(t, l, off, size)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := recycledFiles(t, dir); len(got) != 0 {
		t.Fatalf("Close left files kept for reuse: %v", got)
	}
	l = mustOpen(t, dir, o)
	defer l.Close()
	rec := l.Recovery()
	if !rec.Clean || rec.TruncatedBytes != 0 || len(rec.Notes) != 0 {
		t.Fatalf("reopen after a clean close: %+v", rec)
	}
	rep, err := l.Verify(nil)
	if err != nil || !rep.Healthy() {
		t.Fatalf("Verify: %+v, %v", rep, err)
	}
	for off := first; off < n; off++ {
		checkRead(t, l, off, size)
	}
	minDropped := dropped[0]
	for _, d := range dropped {
		minDropped = min(minDropped, d)
	}
	for _, s := range (*l.segs.Load())[:len(*l.segs.Load())-1] {
		st, err := os.Stat(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() < minDropped-int64(size+16) {
			t.Fatalf("sealed segment %s is %d bytes, dropped ones were %v", s.Path(), st.Size(), dropped)
		}
	}
	if _, err := l.Append(testBody(n, size)); err != nil {
		t.Fatal(err)
	}
}

// A dropped segment that a reader still holds is not reused while it is
// held: the held body keeps its bytes through many rolls.
func TestRecycleWaitsForHolders(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 64 << 10, RecycleSegments: 4})
	defer l.Close()
	const size = 1000
	perSeg := uint64((64 << 10) / (size + 16))
	n := uint64(0)
	appendTo := func(upto uint64) {
		for ; n < upto; n++ {
			if _, err := l.Append(testBody(n, size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendTo(4 * perSeg)
	held, err := l.Read(1)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(held.Body)
	if _, err := l.DropBefore((*l.segs.Load())[2].Base()); err != nil {
		t.Fatal(err)
	}
	heldName := recycledPrefix + segment.Name(0, segment.LogSuffix)
	if _, err := os.Stat(filepath.Join(dir, heldName)); err != nil {
		t.Fatalf("the held segment's file is not kept under %s until its release: %v", heldName, err)
	}
	// Rolls until the segment nobody held has been reused: the preparer,
	// which makes a segment from a kept file, runs beside the appends, and
	// on a loaded machine it may miss many rolls.
	appendTo(20 * perSeg)
	for deadline := time.Now().Add(time.Minute); l.Stats().Recycled < 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the segment nobody held was not reused in %d segments of appends", n/perSeg)
		}
		appendTo(n + perSeg)
	}
	if !bytes.Equal(held.Body, want) {
		t.Fatal("a held body changed after its segment was dropped and segments were reused")
	}
	held.Release()
	appendTo(24 * perSeg)
}

// Recovery never trusts bytes past the last good record: a segment whose
// file holds an older segment's whole, checksummed records past its end
// (what a reused file holds on disk when a power failure came before the
// zeros reached it) recovers to exactly its own records, with or without a
// clean-close marker, and appends go on at the right offsets.
func TestRecycleStaleRecordsPastTheEndNotTrusted(t *testing.T) {
	for _, marker := range []bool{true, false} {
		dir := t.TempDir()
		o := Options{SegmentBytes: 64 << 10}
		l := mustOpen(t, dir, o)
		const size = 500
		perSeg := uint64((64 << 10) / (size + 16))
		var n uint64
		for ; n < perSeg+10; n++ {
			if _, err := l.Append(testBody(n, size)); err != nil {
				t.Fatal(err)
			}
		}
		segs := *l.segs.Load()
		oldPath, active := segs[0].Path(), segs[1]
		end := active.End()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		old, err := os.ReadFile(oldPath)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(active.Path(), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The older segment's records, laid after the end at the same
		// positions they had in their own file.
		if _, err := f.WriteAt(old[end:], end); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		if !marker {
			_ = os.Remove(filepath.Join(dir, cleanName))
		}
		l = mustOpen(t, dir, o)
		if l.Next() != n {
			t.Fatalf("marker %v: Next %d after recovery, want %d (stale records taken for new ones)", marker, l.Next(), n)
		}
		if d := l.Recovery().Active.Damaged; len(d) != 0 {
			t.Fatalf("marker %v: stale records past the end called damage: %+v", marker, d)
		}
		for off := uint64(0); off < n; off++ {
			checkRead(t, l, off, size)
		}
		for k := 0; k < 20; k++ {
			off, err := l.Append(testBody(n, size))
			if err != nil || off != n {
				t.Fatalf("Append after recovery: %d, %v; want %d", off, err, n)
			}
			n++
		}
		for off := uint64(0); off < n; off++ {
			checkRead(t, l, off, size)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, dir, o)
		if l.Next() != n {
			t.Fatalf("marker %v: Next %d after a second reopen, want %d", marker, l.Next(), n)
		}
		_ = l.Close()
	}
}

// RecycleSegments is validated like every option, and files a crash left
// under the recycled name are removed by the next writable open.
func TestRecycleOptionsAndLeftovers(t *testing.T) {
	if err := (Options{RecycleSegments: -1}).Validate(); err == nil {
		t.Fatal("RecycleSegments -1 accepted")
	}
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	_ = l.Close()
	left := filepath.Join(dir, recycledPrefix+segment.Name(0, segment.LogSuffix))
	if err := os.WriteFile(left, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	ro := mustOpenRO(t, dir, Options{})
	if ro.Recovery().Segments != 1 {
		t.Fatalf("a read-only open counted the recycled file as a segment: %+v", ro.Recovery())
	}
	_ = ro.Close()
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("a read-only open removed a file: %v", err)
	}
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	if _, err := os.Stat(left); err == nil {
		t.Fatal("a writable open left the recycled file")
	}
	if notes := strings.Join(l.Recovery().Notes, "\n"); !strings.Contains(notes, recycledPrefix) {
		t.Fatalf("notes do not name the removed file: %q", notes)
	}
}

// A segment dropped after the preparer made the next one as a new file
// takes its place: the new file is removed, the dropped one is prepared
// (RecycleSegments 1 still holds: one spare file), and the next roll
// writes into the dropped segment's file.
func TestRecycledFileReplacesNewPrepared(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 64 << 10, RecycleSegments: 1}
	l := mustOpen(t, dir, o)
	defer l.Close()
	const size = 1000
	for len(*l.segs.Load()) < 2 {
		if _, err := l.Append(testBody(l.Next(), size)); err != nil {
			t.Fatal(err)
		}
	}
	// Past the half of the second segment: a new file is prepared.
	for l.active.End() < o.SegmentBytes*3/4 {
		if _, err := l.Append(testBody(l.Next(), size)); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(fresh bool) func() bool {
		return func() bool {
			return l.admitRecycled(func(int) bool {
				return !l.rolls.preparing && l.rolls.prepared != nil && l.rolls.fresh == fresh
			})
		}
	}
	waitFor(t, "a new file prepared", settled(true))
	oldest := (*l.segs.Load())[0]
	ino := fileInode(t, oldest.Path())
	if k, err := l.DropBefore(l.active.Base()); err != nil || k != 1 {
		t.Fatalf("DropBefore: %d, %v", k, err)
	}
	waitFor(t, "the dropped file prepared in place of the new one", settled(false))
	if st := l.Stats(); st.Recycled != 1 || st.RecycledWaiting != 0 {
		t.Fatalf("Stats: %d reused, %d waiting; want 1, 0", st.Recycled, st.RecycledWaiting)
	}
	if got := fileInode(t, filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)); got != ino {
		t.Fatalf("the prepared file is inode %d, the dropped segment's was %d", got, ino)
	}
	if left := recycledFiles(t, dir); len(left) != 0 {
		t.Fatalf("kept files left beside the prepared one: %v", left)
	}
	base := l.active.Base()
	for l.active.Base() == base {
		if _, err := l.Append(testBody(l.Next(), size)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fileInode(t, l.active.Path()); got != ino {
		t.Fatalf("the segment after the roll is inode %d, the dropped segment's was %d", got, ino)
	}
	for off := l.First(); off < l.Next(); off++ {
		checkRead(t, l, off, size)
	}
}
