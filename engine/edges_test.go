package engine

import (
	"bytes"
	"context"
	"errors"
	"math"
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

	"github.com/pagelog/pagelog/internal/testkit"
)

// The edges of the log: one test per way a probe broke it. Each failed
// before the change that fixed it.

// crashClose stops l as a killed process would: nothing synced, no
// clean-close marker; what was written stays in the page cache.
func crashClose(t testing.TB, l *Log) {
	t.Helper()
	l.closed.Store(true)
	close(l.stop)
	l.bg.Wait()
	l.sync.waitIdle()
	_ = l.closeSegments()
	l.doneRanges()
	if l.lockFile != nil {
		_ = l.lockFile.Close()
	}
}

// writeRecoveryFile puts p in dir's log.recovery, as the log's checkpointer
// does, through a temporary file of its own: the open log's checkpointer
// may replace the file at the same moment (with the same point, or a
// later one), and the two must not share a temporary name.
func writeRecoveryFile(t testing.TB, dir string, p recoveryPoint) {
	t.Helper()
	f, err := os.CreateTemp(dir, "test-recovery-*")
	if err == nil {
		_, err = f.Write(p.encode())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, recoveryName))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestViewFollowsRollsAndDrops: segments dropped, and segments created,
// between a read-only open's listing and its opening of the files are a
// trimmed range and newer records, not a failure.
func TestViewFollowsRollsAndDrops(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4096})
	defer w.Close()
	appendN(t, w, 200, mixedSize)
	t.Cleanup(func() { afterViewListing = nil })

	// Dropped after the listing.
	afterViewListing = func() {
		afterViewListing = nil
		if _, err := w.DropBefore(100); err != nil {
			t.Error(err)
		}
	}
	ro := mustOpenRO(t, dir, Options{})
	if afterViewListing != nil {
		t.Fatal("the read-only open never reached the hook after its listing: nothing was dropped in between")
	}
	if ro.First() < 50 || ro.Next() != w.Next() {
		t.Fatalf("view after a drop: [%d, %d), writer [%d, %d)", ro.First(), ro.Next(), w.First(), w.Next())
	}
	for off := ro.First(); off < ro.Next(); off++ {
		checkRead(t, ro, off, mixedSize(off))
	}
	_ = ro.Close()

	// Rolled after the listing: the new segments are found by name.
	afterViewListing = func() {
		afterViewListing = nil
		appendN(t, w, 100, mixedSize)
	}
	ro = mustOpenRO(t, dir, Options{})
	if afterViewListing != nil {
		t.Fatal("the read-only open never reached the hook after its listing: nothing rolled in between")
	}
	if ro.Next() != w.Next() {
		t.Fatalf("view after rolls: Next %d, writer %d", ro.Next(), w.Next())
	}
	for off := ro.First(); off < ro.Next(); off++ {
		checkRead(t, ro, off, mixedSize(off))
	}
	if v, err := ro.Verify(nil); err != nil || !v.Healthy() {
		t.Fatalf("Verify: %+v %v", v, err)
	}
	_ = ro.Close()
}

// TestViewSurvivesSeal: a view of the active segment, mapped at its
// preallocated size, keeps working (and never reads past a file's end)
// while the writer seals it, trimming the file under the mapping.
func TestViewSurvivesSeal(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 8192})
	defer w.Close()
	appendN(t, w, 10, mixedSize)
	ro := mustOpenRO(t, dir, Options{})
	defer ro.Close()
	end := ro.Next()
	for w.Next() < 200 {
		appendN(t, w, 1, mixedSize)
	}
	for off := ro.First(); off < end; off++ {
		checkRead(t, ro, off, mixedSize(off))
	}
	v, err := ro.Verify(nil)
	if err != nil || !v.Healthy() {
		t.Fatalf("Verify of a view whose segment was sealed under it: %+v %v", v, err)
	}
}

// TestRecoverTakesTheLock: Recover is a writer.
func TestRecoverTakesTheLock(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{})
	defer w.Close()
	if _, err := Recover(dir, Options{}, RecoverOptions{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Recover beside a writer: %v, want ErrLocked", err)
	}
}

// TestOffsetForTimeBesideDropAndClose: OffsetForTime holds references on
// the segments it reads (it crashed in the time index when DropBefore or
// Close unmapped them). Ten rounds of ten drops, five with a Close under
// the readers (twenty rounds of 2,000 records, most of them a roll of
// their own, took four minutes of a loaded machine under -race, a tenth
// of the package).
func TestOffsetForTimeBesideDropAndClose(t *testing.T) {
	for round := range 10 {
		dir := t.TempDir()
		l := mustOpen(t, dir, Options{SegmentBytes: 4096, IndexIntervalBytes: 64})
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 2 {
			spawn(&wg, func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					runtime.Gosched() // the appender gets its turn: spinning readers starved it
					if _, err := l.OffsetForTime(time.Now()); err != nil && !errors.Is(err, ErrClosed) {
						t.Errorf("OffsetForTime: %v", err)
						return
					}
				}
			})
		}
		for range 10 {
			appendN(t, l, 50, mixedSize)
			if _, err := l.DropBefore(l.Next() - 25); err != nil {
				t.Fatal(err)
			}
		}
		if round%2 == 1 {
			_ = l.Close() // under the readers
		}
		close(stop)
		wg.Wait()
		_ = l.Close()
	}
}

// TestReadBesideDrop: a read racing DropBefore gets the record or an
// error matching ErrNotFound, never ErrClosed on an open log. A hundred
// drops (three hundred took a minute and a half of a loaded machine under
// -race).
func TestReadBesideDrop(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	defer l.Close()
	appendN(t, l, 100, mixedSize)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var served atomic.Int64
	for g := range 3 {
		spawn(&wg, func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
				off := l.First() + rng.Uint64N(50)
				r, err := l.Read(off)
				switch {
				case err == nil:
					if !bytes.Equal(r.Body, testBody(off, mixedSize(off))) {
						t.Errorf("Read(%d) served another body", off)
					}
					r.Release()
					served.Add(1)
				case !errors.Is(err, ErrNotFound):
					t.Errorf("Read(%d) beside DropBefore: %v", off, err)
					return
				}
			}
		})
	}
	for range 100 {
		appendN(t, l, 20, mixedSize)
		if _, err := l.DropBefore(l.Next() - 60); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if served.Load() == 0 {
		t.Fatal("no read was served")
	}
}

// TestRecordsAcrossTruncate: a Truncate at or below an iteration ends it
// with an error matching ErrNotFound; it never yields the cut records as
// damage.
func TestRecordsAcrossTruncate(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 8192})
	defer l.Close()
	appendN(t, l, 300, mixedSize)
	var ended error
	n := 0
	for r, err := range l.Records(100) {
		if err != nil {
			ended = err
			break
		}
		if !bytes.Equal(r.Body, testBody(r.Offset, mixedSize(r.Offset))) {
			t.Fatalf("Records(%d) served another body", r.Offset)
		}
		if n++; n == 50 {
			if err := l.Truncate(160); err != nil {
				t.Fatal(err)
			}
			appendN(t, l, 5, func(uint64) int { return 7 }) // new records at the cut offsets
		}
	}
	if !errors.Is(ended, ErrNotFound) || errors.Is(ended, ErrCorrupt) {
		t.Fatalf("Records across a Truncate ended with %v after %d records, want ErrNotFound", ended, n)
	}
	if n > 60 {
		t.Fatalf("Records yielded %d records, past the cut at 160", n)
	}
}

// TestWaitDurableBesideClose: under SyncNone, WaitDurable racing Close
// returns nil only when an fdatasync ran after the record was written.
func TestWaitDurableBesideClose(t *testing.T) {
	for range 200 {
		var syncs atomic.Int64
		opts := Options{datasync: func(f *os.File) error { syncs.Add(1); return nil }}
		l := mustOpen(t, t.TempDir(), opts)
		off, err := l.Append([]byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		before := syncs.Load()
		done := make(chan error, 1)
		go func() { done <- l.WaitDurable(context.Background(), off) }()
		_ = l.Close()
		if err := <-done; err == nil && syncs.Load() == before {
			t.Fatal("WaitDurable returned nil with no fdatasync")
		} else if err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("WaitDurable beside Close: %v", err)
		}
		if l.Durable() > off && syncs.Load() == before {
			t.Fatal("Durable moved with no fdatasync")
		}
	}
}

// TestDoubleRelease: a second Release of a record, or of a copy of it, is
// harmless; the reference counts stay right.
func TestDoubleRelease(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	sizes := appendN(t, l, 5, mixedSize)
	r, err := l.Read(2)
	if err != nil {
		t.Fatal(err)
	}
	c := r
	r.Release()
	r.Release()
	c.Release()
	sizes = append(sizes, appendN(t, l, 200, mixedSize)...) // across rolls
	old, err := l.Read(2)                                   // a sealed segment now
	if err != nil {
		t.Fatal(err)
	}
	kept, err := l.Read(3)
	if err != nil {
		t.Fatal(err)
	}
	old.Release()
	old.Release()
	checkAll(t, l, 0, sizes)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Another holder's record is still valid after Close.
	if !bytes.Equal(kept.Body, testBody(3, sizes[3]-headerSize)) {
		t.Fatal("a held record changed after the other's double release and Close")
	}
	kept.Release()
	kept.Release()
}

// TestRecordsBelowFirst: a consumer that fell behind a drop is told how
// many records it lost, then goes on.
func TestRecordsBelowFirst(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	defer l.Close()
	appendN(t, l, 200, mixedSize)
	if _, err := l.DropBefore(120); err != nil {
		t.Fatal(err)
	}
	first := l.First()
	var errs []error
	var offs []uint64
	for r, err := range l.Records(10) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		offs = append(offs, r.Offset)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrTrimmed) || !errors.Is(errs[0], ErrNotFound) ||
		!strings.Contains(errs[0].Error(), "records lost") {
		t.Fatalf("errors %v, want one ErrTrimmed saying how many were lost", errs)
	}
	if len(offs) == 0 || offs[0] != first || offs[len(offs)-1] != l.Next()-1 {
		t.Fatalf("then yields [%v..], want [%d, %d)", offs[:min(3, len(offs))], first, l.Next())
	}
	if _, err := l.Read(5); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("Read of a dropped offset: %v, want ErrTrimmed", err)
	}
}

// flipActiveTail writes a clean log whose active segment holds records past
// its last index entry, and flips a body byte of one of them: the damaged
// offset is returned.
func flipActiveTail(t *testing.T, dir string) ([]int, uint64) {
	t.Helper()
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 1 << 16})
	sizes := appendN(t, l, 30, mixedSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var pos int64
	for _, s := range sizes[:20] {
		pos += int64(s)
	}
	patch(t, segPath(dir, 0, ".log"), pos+headerSize+1, []byte{0xee})
	return sizes, 20
}

// TestReadOnlyOpenAppliesTheSameRules: one flipped body byte in a cleanly
// closed active segment is damage to read-only opens too, never a torn
// tail that hides the records after it.
func TestReadOnlyOpenAppliesTheSameRules(t *testing.T) {
	dir := t.TempDir()
	sizes, bad := flipActiveTail(t, dir)
	for _, open := range []func(string, Options) (*Log, error){OpenReadOnly, Open} {
		l, err := open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Next() != uint64(len(sizes)) || l.Recovery().Active.Cut {
			t.Fatalf("open (read-only %v): Next %d, report %+v", l.readOnly, l.Next(), l.Recovery().Active)
		}
		checkAllExcept(t, l, sizes, map[uint64]bool{bad: true})
		v, _ := l.Verify(nil)
		if v.Damaged != 1 || len(v.IndexProblems) != 0 || v.Healthy() {
			t.Fatalf("Verify: %+v", v)
		}
		_ = l.Close()
	}
}

// TestKeptDamageSurvivesACrash: damage kept by a writable open is not cut
// by the next recovery after kill -9: the records acknowledged after it
// stay.
func TestKeptDamageSurvivesACrash(t *testing.T) {
	dir := t.TempDir()
	sizes, bad := flipActiveTail(t, dir)
	l := mustOpen(t, dir, Options{})
	sizes = append(sizes, appendN(t, l, 53, mixedSize)...)
	crashClose(t, l)
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	if l.Next() != uint64(len(sizes)) {
		t.Fatalf("after the crash Next %d, want %d: acknowledged records were cut (report %+v)", l.Next(), len(sizes), l.Recovery().Active)
	}
	checkAllExcept(t, l, sizes, map[uint64]bool{bad: true})
	if d := l.Recovery().Active.Damaged; len(d) != 1 || d[0].Offset != bad {
		t.Fatalf("damage not reported: %+v", l.Recovery().Active)
	}
}

// TestDamageBelowTheRecoveryPointIsNotReused: a damaged last synced record
// below the recovery point is reported, not cut, and its offset is never
// given to a new record.
func TestDamageBelowTheRecoveryPointIsNotReused(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncAlways})
	sizes := appendN(t, l, 100, mixedSize)
	writeRecoveryFile(t, dir, l.sync.recoveryPoint())
	crashClose(t, l)
	var pos int64
	for _, s := range sizes[:99] {
		pos += int64(s)
	}
	patch(t, segPath(dir, 0, ".log"), pos+headerSize+2, []byte{0x5a})
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	a := l.Recovery().Active
	if a.Cut || len(a.Damaged) != 1 || a.Damaged[0].Offset != 99 || l.Next() != 100 {
		t.Fatalf("recovery %+v, Next %d: want damage at 99 kept, nothing cut", a, l.Next())
	}
	if off, err := l.Append([]byte("new")); err != nil || off != 100 {
		t.Fatalf("Append after: %d, %v; want 100", off, err)
	}
	if _, err := l.Read(99); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read(99): %v, want ErrCorrupt", err)
	}
}

// TestLeftoverIndexFiles: index files without their .log are reported by
// read-only opens and Verify, removed by writable ones, and never keep a
// roll from creating the segment.
func TestLeftoverIndexFiles(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	sizes := appendN(t, l, 10, mixedSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Where the next roll goes, and far away.
	next := uint64(len(sizes))
	for _, base := range []uint64{next, next + 1, 5000} {
		for _, suf := range []string{".index", ".timeindex"} {
			if err := os.WriteFile(segPath(dir, base, suf), []byte("stale"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	ro := mustOpenRO(t, dir, Options{})
	v, _ := ro.Verify(nil)
	if v.Healthy() || len(ro.Recovery().Leftovers) != 6 {
		t.Fatalf("read-only open: leftovers %q, verify healthy %v", ro.Recovery().Leftovers, v.Healthy())
	}
	_ = ro.Close()
	l = mustOpen(t, dir, Options{SegmentBytes: 4096})
	sizes = append(sizes, appendN(t, l, 200, mixedSize)...)
	checkAll(t, l, 0, sizes)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ro = mustOpenRO(t, dir, Options{})
	defer ro.Close()
	if v, _ := ro.Verify(nil); !v.Healthy() {
		t.Fatalf("after the writable session: %+v", v)
	}
}

// TestOffsetSpaceEnds: offsets never wrap: the last offsets are usable,
// then appends get ErrFull; a first offset with no room is refused.
func TestOffsetSpaceEnds(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{FirstOffset: math.MaxUint64}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("FirstOffset 2^64-1: %v, want ErrBadOptions", err)
	}
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{FirstOffset: math.MaxUint64 - 3, SegmentBytes: 4096})
	var got []uint64
	for {
		off, err := l.Append([]byte("near the end"))
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, off)
	}
	if !slices.Equal(got, []uint64{math.MaxUint64 - 3, math.MaxUint64 - 2, math.MaxUint64 - 1}) {
		t.Fatalf("offsets %v", got)
	}
	if v, err := l.Verify(nil); err != nil || !v.Healthy() || v.Records != 3 {
		t.Fatalf("Verify: %+v %v", v, err)
	}
	n := 0
	for range l.Records(0) {
		n++
	}
	if n != 3 {
		t.Fatalf("Records yields %d", n)
	}
	_ = l.Close()
}

// TestMissingSegmentIsOneRange: a removed middle segment is reported as
// one missing range, at once, and blamed on no intact record.
func TestMissingSegmentIsOneRange(t *testing.T) {
	src, sizes, segs := damageTemplate(t)
	dir := copyDir(t, src)
	gone := segs[2]
	for _, suf := range []string{".log", ".index", ".timeindex"} {
		if err := os.Remove(segPath(dir, gone.base, suf)); err != nil {
			t.Fatal(err)
		}
	}
	from, to := gone.base, segs[3].base
	for _, open := range []func(string, Options) (*Log, error){OpenReadOnly, Open} {
		l, err := open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := l.Verify(nil)
		if err != nil || v.Missing != to-from || v.Damaged != 0 || len(v.Problems) != 1 ||
			!strings.Contains(v.Problems[0], "missing") || v.Records != uint64(len(sizes))-(to-from) {
			t.Fatalf("Verify: %+v %v", v, err)
		}
		var missing []RecordInfo
		for ri := range l.Inspect(0) {
			if !ri.OK {
				missing = append(missing, ri)
			}
		}
		if len(missing) != 1 || missing[0].Offset != from || missing[0].Missing != to-from || missing[0].Position != -1 {
			t.Fatalf("Inspect: %+v", missing)
		}
		var errs []error
		for _, err := range l.Records(0) {
			if err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) != 1 || !errors.Is(errs[0], ErrCorrupt) {
			t.Fatalf("Records: errors %v, want one for the range", errs)
		}
		if _, err := l.Read(from + 3); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Read of a missing offset: %v", err)
		}
		_ = l.Close()
	}
}

// TestIndexIntervalChange: indexes written with another spacing are not
// index problems; the setting is validated like every other.
func TestIndexIntervalChange(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 16 << 10})
	sizes := appendN(t, l, 300, mixedSize)
	_ = l.Close()
	l = mustOpen(t, dir, Options{IndexIntervalBytes: 512})
	sizes = append(sizes, appendN(t, l, 300, mixedSize)...)
	_ = l.Close()
	for _, open := range []func(string, Options) (*Log, error){OpenReadOnly, Open} {
		l, err := open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := l.Verify(nil); err != nil || !v.Healthy() {
			t.Fatalf("Verify after a change of IndexIntervalBytes: %+v %v", v, err)
		}
		checkAll(t, l, 0, sizes)
		_ = l.Close()
	}
	for _, o := range []Options{{IndexIntervalBytes: intervalOverLimit()}, {IndexIntervalBytes: -1}, {SyncInterval: -1},
		{SegmentBytes: -1}, {MaxRecordBytes: -5}, {FileMode: os.ModeDir | 0o600}} {
		_, err := Open(t.TempDir(), o)
		if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "(0:") && !strings.Contains(err.Error(), "bits") {
			t.Errorf("Open(%+v): %v, want ErrBadOptions naming the range and what 0 means", o, err)
		}
	}
}

// TestDamageReports: one flipped body byte is one damaged record and no
// index problem; garbage after a sealed segment's last record is reported.
func TestDamageReports(t *testing.T) {
	src, sizes, segs := damageTemplate(t)
	dir := copyDir(t, src)
	s := segs[1]
	patch(t, segPath(dir, s.base, ".log"), s.positions()[7]+headerSize+3, []byte{0x77})
	l := mustOpenRO(t, dir, Options{})
	v, _ := l.Verify(nil)
	if v.Damaged != 1 || len(v.IndexProblems) != 0 || v.Records != uint64(len(sizes)-1) {
		t.Fatalf("one flipped byte: %+v", v)
	}
	_ = l.Close()

	dir = copyDir(t, src)
	f, err := os.OpenFile(segPath(dir, segs[2].base, ".log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write(bytes.Repeat([]byte{0xab}, 100))
	_ = f.Close()
	l = mustOpenRO(t, dir, Options{})
	defer l.Close()
	v, _ = l.Verify(nil)
	if v.Healthy() || !slices.ContainsFunc(v.IndexProblems, func(p string) bool { return strings.Contains(p, "not a record") }) {
		t.Fatalf("garbage after a sealed segment: %+v", v)
	}
	checkAll(t, l, 0, sizes)
}

// TestNoLogThere: read-only opens and Recover of a directory that holds no
// log say so, and create nothing.
func TestNoLogThere(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := hashDir(t, dir)
	if _, err := OpenReadOnly(dir, Options{}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("OpenReadOnly of a directory with no log: %v", err)
	}
	if _, err := Recover(dir, Options{}, RecoverOptions{}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("Recover of a directory with no log: %v", err)
	}
	if d := testkit.DiffHashes(before, hashDir(t, dir)); d != "" {
		t.Fatalf("changed: %s", d)
	}
	missing := filepath.Join(dir, "no", "such")
	if _, err := Recover(missing, Options{}, RecoverOptions{}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("Recover of a path that does not exist: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Recover created the path")
	}
}
