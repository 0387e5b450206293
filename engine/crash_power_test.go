package engine

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// TestCrashPowerLoss simulates power failures. The datasync hook stands for
// the disk: at each fdatasync it keeps a copy of the file as the page cache
// holds it (what is synced survives a power failure), and returns at once.
// A case appends records under SyncAlways, crashes (between two appends, or
// inside a datasync, before it took effect: the record being appended or the
// segment being sealed is then not on disk yet), and builds what a disk may
// hold after the failure from the synced copies and the page cache: for each
// 512-byte sector that changed since its last sync, the new content, the old
// one, zeros where nothing was ever synced, or, 4 KiB page by page, a mix.
// Open must then succeed, keep every acknowledged record, serve nothing but
// the records appended (every offset in [First, Next) reads and holds what
// was appended there) and go on appending at Next.
func TestCrashPowerLoss(t *testing.T) {
	seed := crashSeedFor(t)
	var st crashPowerStats
	scratch := crashScratchDir(t)
	began := time.Now()
	for c := range *crashPower {
		if *crashCase >= 0 && c != *crashCase {
			continue
		}
		crashPowerCase(t, scratch, seed, c, &st)
	}
	t.Logf("%d cases in %v (crash between appends %d, inside an append's sync %d, inside a seal %d): "+
		"%d acknowledged records verified, %d more kept, %d lost unacknowledged",
		st.cases, time.Since(began).Round(time.Millisecond), st.between, st.inSync, st.inSeal,
		st.acked, st.survivors, st.lost)
	t.Logf("crash states: %d sectors new, %d old, %d zeroed, %d pages torn, %d files never synced, "+
		"%d truncated to the synced size, %d extended, %d new segments lost with their directory entry, %d recovery points",
		st.SectorsNew, st.SectorsOld, st.SectorsZero, st.PagesTorn, st.Unsynced, st.Truncated, st.extended,
		st.droppedSegments, st.recoveryPoints)
	t.Logf("recovery: %d torn tails seen, %d reported as cuts (%d bytes), %d indexes rebuilt, %d sealed segments trimmed",
		st.tornSeen, st.cuts, st.tornBytes, st.indexesRebuilt, st.sealedTrimmed)
	// Each kind of crash point, and a torn sector, in the default 200
	// cases (about a quarter to a half each): none means the cases no
	// longer reach it.
	if *crashCase < 0 && *crashPower >= 100 && (st.between == 0 || st.inSync == 0 || st.inSeal == 0 || st.SectorsOld == 0) {
		t.Fatalf("a kind of case never came: %d crashes between appends, %d inside a sync, %d inside a seal, %d sectors kept old",
			st.between, st.inSync, st.inSeal, st.SectorsOld)
	}
}

type crashPowerStats struct {
	cases, between, inSync, inSeal int
	acked, survivors, lost         int
	testkit.TearStats
	extended, droppedSegments, recoveryPoints     int
	tornSeen, cuts, indexesRebuilt, sealedTrimmed int
	tornBytes                                     int64
}

// crashDisk is the simulated disk behind the datasync hook.
type crashDisk struct {
	dir string
	mu  sync.Mutex
	// synced holds each segment file as its last datasync found it.
	synced map[string][]byte
	// The crash: inside the syncAt-th datasync call, or the sealAt-th one
	// that seals a segment (0: neither).
	calls, seals    int
	syncAt, sealAt  int
	crashed, inSeal bool
	current         map[string][]byte // every file at the moment of the crash
}

func (d *crashDisk) datasync(f *os.File) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.crashed {
		return nil
	}
	d.calls++
	seal := d.sealing(filepath.Base(f.Name()))
	if seal {
		d.seals++
	}
	if d.calls == d.syncAt || seal && d.seals == d.sealAt {
		d.crashLocked(seal)
		return nil
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return err
	}
	d.synced[filepath.Base(f.Name())] = b
	return nil
}

// sealing reports whether a datasync of name is part of a seal: of an index
// file, or of a .log file with a newer segment beside it.
func (d *crashDisk) sealing(name string) bool {
	base, suffix, ok := segment.ParseName(name)
	if !ok {
		return false
	}
	if suffix != segment.LogSuffix {
		return true
	}
	bases, _ := listSegments(d.dir)
	return len(bases) > 0 && bases[len(bases)-1] > base
}

func (d *crashDisk) crash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.crashLocked(false)
}

// crashLocked takes the picture of the page cache at the moment of the
// crash: the content of every file.
func (d *crashDisk) crashLocked(inSeal bool) {
	d.crashed, d.inSeal = true, inSeal
	d.current = map[string][]byte{}
	entries, _ := os.ReadDir(d.dir)
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(d.dir, e.Name())); err == nil {
			d.current[e.Name()] = b
		}
	}
}

func (d *crashDisk) isCrashed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.crashed
}

func crashPowerOptions(sync func(*os.File) error) Options {
	return Options{SegmentBytes: 16 << 10, IndexIntervalBytes: 512, MaxRecordBytes: 1024, Sync: SyncAlways, datasync: sync}
}

// crashPowerCase runs one case: append, crash, build the crash state, open
// it and check it.
func crashPowerCase(t *testing.T, scratch string, seed uint64, c int, st *crashPowerStats) {
	rng := crashRand(seed, uint64(c)+1)
	root, err := os.MkdirTemp(scratch, "case")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	dir := filepath.Join(root, "log")
	disk := &crashDisk{dir: dir, synced: map[string][]byte{}}
	opts := crashPowerOptions(disk.datasync)
	if rng.IntN(4) == 0 {
		opts.FirstOffset = rng.Uint64N(1 << 40)
	}
	first := opts.FirstOffset
	salt := uint64(c) + 1
	want := func(off uint64) []byte { return crashBody(off, salt, 0, 600) }

	n := 50 + rng.IntN(351)
	stopAfter := n // crash between appends after this many
	var how string
	switch rng.IntN(4) {
	case 0:
		stopAfter = rng.IntN(n + 1)
		how = fmt.Sprintf("between appends, after %d of %d", stopAfter, n)
	case 1, 2:
		disk.syncAt = 1 + rng.IntN(n)
		how = fmt.Sprintf("inside datasync call %d (%d appends planned)", disk.syncAt, n)
	default:
		disk.sealAt = 1 + rng.IntN(3*max(1, n*320/(16<<10)))
		how = fmt.Sprintf("inside the datasync %d of seals (%d appends planned)", disk.sealAt, n)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("case %d (crash %s; replay: -crash.seed=%d -crash.case=%d): %s",
			c, how, seed, c, fmt.Sprintf(format, args...))
	}

	l, err := Open(dir, opts)
	if err != nil {
		fail("Open: %v", err)
	}
	acked, written := first, first // [first, acked) acknowledged, [first, written) written
	var points []recoveryPoint     // recovery points the checkpointer may have written
	for i := 0; i < stopAfter && !disk.isCrashed(); i++ {
		off := l.Next()
		written = off + 1
		got, err := l.Append(want(off))
		if disk.isCrashed() {
			break // the crash came before the acknowledgement
		}
		if err != nil || got != off {
			fail("Append: offset %d, %v; want %d", got, err, off)
		}
		acked = off + 1
		if p := l.sync.recoveryPoint(); p.Pos > 0 && (len(points) == 0 || points[len(points)-1] != p) {
			points = append(points, p)
		}
	}
	switch {
	case !disk.isCrashed():
		disk.crash()
		st.between++
		if disk.syncAt > 0 || disk.sealAt > 0 {
			how += ", not reached: crash after the last append"
		}
	case disk.inSeal:
		st.inSeal++
	default:
		st.inSync++
	}
	if err := l.Close(); err != nil {
		fail("Close of the original: %v", err)
	}

	cdir := filepath.Join(root, "crash")
	newest, before := crashBuildState(t, rng, disk, cdir, points, st)
	crashCheckPowerState(t, cdir, first, acked, written, want, newest, before, st, fail)
	st.cases++
	st.acked += int(acked - first)
}

// crashBuildState writes into cdir what the disk may hold after the crash.
// It returns the newest segment's .log name and content.
func crashBuildState(t *testing.T, rng *rand.Rand, d *crashDisk, cdir string, points []recoveryPoint, st *crashPowerStats) (string, []byte) {
	t.Helper()
	if err := os.Mkdir(cdir, 0o700); err != nil {
		t.Fatal(err)
	}
	var bases []uint64
	for name := range d.current {
		if base, suffix, ok := segment.ParseName(name); ok && suffix == segment.LogSuffix {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	newestBase := bases[len(bases)-1]
	// A crash inside a seal comes before the directory sync that follows
	// it: the new segment's files may be gone.
	dropNewest := d.inSeal && len(bases) > 1 && rng.IntN(2) == 0
	if dropNewest {
		st.droppedSegments++
		newestBase = bases[len(bases)-2]
	}
	var newestLog []byte
	for _, name := range slices.Sorted(maps.Keys(d.current)) {
		cur := d.current[name]
		base, _, isSeg := segment.ParseName(name)
		out := cur // checkpoints are replaced atomically, with fsync
		if isSeg {
			if dropNewest && base == bases[len(bases)-1] {
				continue
			}
			out = crashSegmentFile(rng, d.synced[name], cur, base == newestBase, st)
		}
		if name == segment.Name(newestBase, segment.LogSuffix) {
			newestLog = out
		}
		if err := os.WriteFile(filepath.Join(cdir, name), out, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The checkpointer writes the newest recovery point once a second: any
	// point a sync reached before the crash may be on disk, or none.
	if len(points) > 0 {
		path := filepath.Join(cdir, recoveryName)
		switch rng.IntN(4) {
		case 0:
			_ = os.Remove(path)
		case 1:
			crashWrite(t, path, points[len(points)-1].encode())
			st.recoveryPoints++
		case 2:
			crashWrite(t, path, points[rng.IntN(len(points))].encode())
			st.recoveryPoints++
		}
	}
	return segment.Name(newestBase, segment.LogSuffix), newestLog
}

func crashWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// crashSegmentFile returns what a segment file may hold after the crash,
// given its last synced content (nil: never synced) and the page cache's:
// a torn mix of the two (testkit.TearFile), and now and then zeros past
// the end of the newest segment.
func crashSegmentFile(rng *rand.Rand, synced, cur []byte, newest bool, st *crashPowerStats) []byte {
	out := testkit.TearFile(rng, synced, synced != nil, cur, &st.TearStats)
	if newest && len(out) == len(cur) && rng.IntN(8) == 0 {
		out = append(out, make([]byte, rng.IntN(4096))...) // zeros past the end
		st.extended++
	}
	return out
}

// crashCheckPowerState opens the crash state and checks it.
func crashCheckPowerState(t *testing.T, cdir string, first, acked, written uint64, want func(uint64) []byte,
	newest string, before []byte, st *crashPowerStats, fail func(string, ...any)) {
	t.Helper()
	l, err := Open(cdir, crashPowerOptions(func(*os.File) error { return nil }))
	if err != nil {
		fail("Open of the crash state: %v", err)
	}
	rec := l.Recovery()
	next := l.Next()
	switch {
	case l.First() != first:
		fail("First is %d, want %d", l.First(), first)
	case next < acked:
		fail("Next is %d: acknowledged records [%d, %d) lost (recovery %+v)", next, next, acked, rec.Active)
	case next > written:
		fail("Next is %d, but only [%d, %d) was ever written (recovery %+v)", next, first, written, rec.Active)
	case len(rec.Active.Damaged) > 0:
		fail("recovery reports damage where only unsynced bytes were lost: %+v (recovery point %d)",
			rec.Active.Damaged, rec.Active.RecoveryPoint)
	}
	if msg := crashCheckRange(l, first, next, want); msg != "" {
		fail("%s (recovery %+v, sealed %+v)", msg, rec.Active, rec.Sealed)
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		fail("Verify after recovery: %v, %d damaged, first %+v, index problems %q", err, rep.Damaged, rep.FirstDamage, rep.IndexProblems)
	}
	if rec.Active.Segment == newest && rec.Active.End < int64(len(before)) && !testkit.AllZero(before[rec.Active.End:]) {
		st.tornSeen++
	}
	if rec.Active.Cut {
		st.cuts++
		st.tornBytes += rec.Active.TornBytes
	}
	st.indexesRebuilt += rec.IndexesRebuilt
	for _, s := range rec.Sealed {
		if s.ZeroedBytes > 0 {
			st.sealedTrimmed++
		}
	}
	st.survivors += int(next - acked)
	st.lost += int(written - next)

	// Another body than the lost one at that offset, so that what is left
	// of a torn record is not simply overwritten by its twin.
	again := func(off uint64) []byte { return crashBody(off, ^uint64(0), 0, 600) }
	off, err := l.Append(again(next))
	if err != nil || off != next {
		fail("Append after recovery: offset %d, %v; want %d", off, err, next)
	}
	if msg := crashCheckRange(l, off, off+1, again); msg != "" {
		fail("reading back the append after recovery: %s", msg)
	}
	end, path := l.active.End(), l.active.Path()
	if err := l.Close(); err != nil {
		fail("Close after recovery: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || !testkit.AllZero(b[min(end, int64(len(b))):]) {
		fail("bytes past the end (%d) of %s are not all zero after recovery and an append (%v)", end, path, err)
	}
}

// TestCrashPowerLossDuringRoll: under SyncAlways, appender A's record r1 is
// the last that fits in segment S1; A's group-commit sync of S1 has not
// run yet when appender B's record rolls the log: B creates S2, then Seal
// trims S1 and syncs it. Power fails between the two. S1's size (metadata)
// reached the disk but r1's bytes did not: S1 ends in zeros where r1 was,
// and S2 exists, empty. Nobody was told r1 was stored, so losing it is
// allowed; but the log must not then claim an offset it cannot read: every
// offset in [First, Next) must read.
func TestCrashPowerLossDuringRoll(t *testing.T) {
	root := crashScratchDir(t)
	dir := filepath.Join(root, "log")
	disk := &crashDisk{dir: dir, synced: map[string][]byte{}}
	var (
		mu      sync.Mutex
		blockA  bool
		aInSync = make(chan struct{})
		release = make(chan struct{})
	)
	hook := func(f *os.File) error {
		mu.Lock()
		block := blockA && strings.HasSuffix(f.Name(), segment.LogSuffix)
		blockA = false
		mu.Unlock()
		if block {
			close(aInSync)
			<-release
		}
		return disk.datasync(f)
	}
	opts := crashPowerOptions(hook)
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := func(off uint64) []byte { return crashBody(off, 1, 200, 200) }
	// Fill S1 until 216..431 bytes are left: r1 (216) fits, B's does not.
	for opts.SegmentBytes-l.active.End() >= 432 {
		if _, err := l.Append(want(l.Next())); err != nil {
			t.Fatal(err)
		}
	}
	acked := l.Next()
	s1 := segment.Name(l.active.Base(), segment.LogSuffix)

	// A appends r1 (216 bytes: it fits) and stops in its sync.
	mu.Lock()
	blockA = true
	mu.Unlock()
	r1 := l.Next()
	aDone := make(chan error, 1)
	go func() {
		_, err := l.Append(want(r1))
		aDone <- err
	}()
	<-aInSync
	// B's record does not fit: it rolls, and the power fails in the seal.
	disk.mu.Lock()
	disk.sealAt = disk.seals + 1
	disk.mu.Unlock()
	bDone := make(chan error, 1)
	go func() {
		_, err := l.Append(make([]byte, 1000))
		bDone <- err
	}()
	for deadline := time.Now().Add(time.Minute); !disk.isCrashed(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the roll did not reach its seal")
		}
	}
	close(release)
	if err := errors.Join(<-aDone, <-bDone, l.Close()); err != nil {
		t.Fatal(err)
	}
	if !disk.inSeal {
		t.Fatal("the crash did not come inside the seal")
	}

	// The disk after the failure: S1's data as last synced (without r1),
	// at its new size; every other file as the page cache held it.
	cdir := filepath.Join(root, "crash")
	if err := os.Mkdir(cdir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, cur := range disk.current {
		out := cur
		if name == s1 {
			out = make([]byte, len(cur))
			copy(out, disk.synced[name])
		}
		crashWrite(t, filepath.Join(cdir, name), out)
	}
	l, err = Open(cdir, crashPowerOptions(func(*os.File) error { return nil }))
	if err != nil {
		t.Fatalf("Open after the crash: %v", err)
	}
	defer l.Close()
	if l.Next() < acked {
		t.Fatalf("Next %d: acknowledged records lost (below %d)", l.Next(), acked)
	}
	if msg := crashCheckRange(l, l.First(), l.Next(), want); msg != "" {
		t.Errorf("%s\nr1 = %d was never acknowledged and may be lost, but Next is %d: the log claims an offset "+
			"it cannot read (recovery: active %+v, sealed %+v)", msg, r1, l.Next(), l.Recovery().Active, l.Recovery().Sealed)
	}
	if off, err := l.Append(want(l.Next())); err != nil || off != l.Next()-1 {
		t.Fatalf("Append after recovery: %d, %v", off, err)
	}
}
