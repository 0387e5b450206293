//go:build linux

package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
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

// The swap of a new prepared segment for a dropped file kept for reuse
// (admitRecycled, prepareLoop) keeps the bound of RecycleSegments, every
// record and a clean directory: under drops at every phase of a
// segment's fill, with the preparer blocked in the middle of its work,
// Close in the middle of the swap, a full disk, kept files tampered with,
// and kill -9.

// swapView is the reuse state of a log at one moment, read under the
// locks the preparer decides under.
type swapView struct {
	kept      int  // files kept for reuse
	spare     int  // a reused prepared segment (waiting or being made)
	fresh     bool // the prepared segment is (or is being made) a new file
	prepared  bool // a prepared segment waits
	preparing bool
}

func swapState(l *Log) (v swapView) {
	l.admitRecycled(func(int) bool {
		v = swapView{kept: len(l.recycle.paths), fresh: l.rolls.fresh,
			prepared: l.rolls.prepared != nil, preparing: l.rolls.preparing}
		if (v.prepared || v.preparing) && !v.fresh {
			v.spare = 1
		}
		return false
	})
	return v
}

// settled: the preparer is idle and no new prepared file waits beside a
// kept one.
func (v swapView) settled() bool { return !v.preparing && !(v.prepared && v.fresh && v.kept > 0) }

// swapSettled waits for the preparer to settle with the directory in step
// with the log: as many recycled-* files as kept files (every reference to
// a dropped segment is gone, so every dropped file is kept or removed),
// and a prepared.log exactly when a prepared segment waits. A kick still
// pending may start the preparer once more: the state must hold still
// while the directory is read. It fails the test with what it saw last.
func swapSettled(t *testing.T, l *Log, dir string) swapView {
	t.Helper()
	var v swapView
	var files, prepared []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		v = swapState(l)
		files, prepared = recycledFiles(t, dir), preparedFiles(t, dir)
		if v.settled() && swapState(l) == v && len(files) == v.kept && len(prepared) > 0 == v.prepared {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the load stopped: reuse state %+v, recycled files %v, prepared %v", v, files, prepared)
		}
	}
}

// swapSize is a body size for offset off in a log of segBytes segments:
// larger than a segment now and then.
func swapSize(segBytes int64) func(uint64) int {
	limit := uint64(min(max(segBytes/12, 200), 3000))
	return func(off uint64) int {
		x := crashMix(off + 17)
		if x%23 == 0 {
			return int(min(uint64(segBytes)+100, 8000))
		}
		return int(x >> 8 % limit)
	}
}

// Appends, drops at random points (one segment at a time at the drop
// point, everything sealed, or anywhere), readers holding records across
// the drops, for 1-byte, 4 KiB and 64 KiB segments and 1 to 3 kept files,
// each over three opens. Throughout: the kept files and a reused prepared
// segment are never more than RecycleSegments. Once the load stops the
// preparer settles (no new prepared file beside a kept one), every
// dropped file is kept or gone (the directory's recycled-* files are the
// kept ones), every record from First reads back, Verify is healthy,
// Close leaves no recycled-* or prepared.* file and the reopen is clean,
// with no note: no index file a drop racing a reader's first read could
// once write back after the drop removed it (see Segment.MarkDropped).
func TestRecycleSwapStaysBoundedUnderDrops(t *testing.T) {
	var swaps, reused atomic.Int64
	for _, segBytes := range []int64{1, 4 << 10, 64 << 10} {
		for spare := 1; spare <= 3; spare++ {
			t.Run(fmt.Sprintf("seg=%d/spare=%d", segBytes, spare), func(t *testing.T) {
				s, r := swapStorm(t, segBytes, spare)
				swaps.Add(s)
				reused.Add(r)
			})
		}
	}
	t.Logf("%d states seen with a new prepared file beside a kept one; %d segments made from kept files", swaps.Load(), reused.Load())
	if !t.Failed() && reused.Load() == 0 {
		t.Fatal("no segment was made from a kept file: the test missed reuse")
	}
}

func swapStorm(t *testing.T, segBytes int64, spare int) (swaps, reused int64) {
	dir := t.TempDir()
	o := Options{SegmentBytes: segBytes, RecycleSegments: spare}
	size := swapSize(segBytes)
	want := func(off uint64) []byte { return testBody(off, size(off)) }
	perCycle := map[int64]int{1: 200, 4 << 10: 1000, 64 << 10: 2500}[segBytes]
	var lastFirst uint64
	for cycle := range 3 {
		l, err := Open(dir, o)
		if err != nil {
			t.Fatalf("cycle %d: Open: %v", cycle, err)
		}
		if rec := l.Recovery(); cycle > 0 && (!rec.Clean || len(rec.Notes) > 0) {
			t.Fatalf("cycle %d: the reopen after Close found %+v", cycle, rec)
		}
		if l.First() < lastFirst {
			t.Fatalf("cycle %d: First went back from %d to %d", cycle, lastFirst, l.First())
		}
		var (
			stop      atomic.Bool
			wg        sync.WaitGroup
			dropAsked atomic.Uint64
			mu        sync.Mutex
			bad       []string
			held      []Record
		)
		fail := func(format string, args ...any) {
			mu.Lock()
			bad = append(bad, fmt.Sprintf(format, args...))
			mu.Unlock()
			stop.Store(true)
		}
		spawn(&wg, func() { // appender
			defer stop.Store(true)
			for i := 0; i < perCycle && !stop.Load(); i++ {
				if i%50 == 49 {
					next := l.Next()
					bodies := [][]byte{want(next), want(next + 1), want(next + 2)}
					off, n, err := l.AppendBatch(bodies, nil)
					if err != nil || n != 3 || off != next {
						fail("AppendBatch at %d: %d, %d, %v", next, off, n, err)
						return
					}
					continue
				}
				next := l.Next()
				if off, err := l.Append(want(next)); err != nil || off != next {
					fail("Append at %d: %d, %v", next, off, err)
					return
				}
			}
		})
		spawn(&wg, func() { // dropper
			rng := rand.New(rand.NewPCG(uint64(segBytes), uint64(spare*10+cycle)))
			for !stop.Load() {
				time.Sleep(time.Duration(rng.IntN(400)) * time.Microsecond)
				var to uint64
				switch rng.IntN(3) {
				case 0:
					p, ok := l.DropPoint()
					if !ok {
						continue
					}
					to = p
				case 1:
					to = l.Next()
				default:
					first, next := l.First(), l.Next()
					to = first + rng.Uint64N(next-first+1)
				}
				for {
					old := dropAsked.Load()
					if to <= old || dropAsked.CompareAndSwap(old, to) {
						break
					}
				}
				if _, err := l.DropBefore(to); err != nil {
					fail("DropBefore(%d): %v", to, err)
					return
				}
			}
		})
		for r := range 2 {
			spawn(&wg, func() { // readers, holding records across drops
				rng := rand.New(rand.NewPCG(uint64(r), uint64(cycle)))
				var mine []Record
				defer func() {
					mu.Lock()
					held = append(held, mine...)
					mu.Unlock()
				}()
				for !stop.Load() {
					time.Sleep(30 * time.Microsecond) // the appender has the CPU
					first, next := l.First(), l.Next()
					if next == first {
						continue
					}
					off := first + rng.Uint64N(next-first)
					rec, err := l.Read(off)
					if err != nil {
						if l.First() <= off {
							fail("Read(%d) in [%d, %d): %v", off, l.First(), next, err)
							return
						}
						continue // dropped meanwhile
					}
					if rec.Offset != off || !bytes.Equal(rec.Body, want(off)) {
						fail("Read(%d) served another record (offset %d)", off, rec.Offset)
					}
					mine = append(mine, rec)
					if len(mine) > 6 {
						h := mine[0]
						mine = mine[1:]
						if !bytes.Equal(h.Body, want(h.Offset)) {
							fail("record %d changed while held", h.Offset)
						}
						h.Release()
					}
				}
			})
		}
		spawn(&wg, func() { // the bound, under the preparer's locks
			for !stop.Load() {
				v := swapState(l)
				if v.kept+v.spare > spare {
					fail("%d kept files and %d reused prepared segment: more than RecycleSegments %d (%+v)", v.kept, v.spare, spare, v)
					return
				}
				if v.prepared && v.fresh && v.kept > 0 {
					swaps++
				}
				time.Sleep(50 * time.Microsecond)
			}
		})
		wg.Wait()
		if len(bad) > 0 {
			_ = l.Close()
			t.Fatalf("cycle %d: %s", cycle, strings.Join(bad, "\n"))
		}
		for _, h := range held {
			if !bytes.Equal(h.Body, want(h.Offset)) {
				t.Errorf("cycle %d: record %d changed while held", cycle, h.Offset)
			}
			h.Release()
		}
		v := swapSettled(t, l, dir)
		if v.kept+v.spare > spare {
			t.Fatalf("cycle %d: settled with %+v, RecycleSegments %d", cycle, v, spare)
		}
		if d := dropAsked.Load(); l.First() > max(d, lastFirst) {
			t.Fatalf("cycle %d: First %d; no drop asked past %d", cycle, l.First(), d)
		}
		lastFirst = l.First()
		for off := l.First(); off < l.Next(); off++ {
			checkRead(t, l, off, size(off))
		}
		verifyHealthy(t, l, fmt.Sprintf("cycle %d", cycle))
		reused += int64(l.Stats().Recycled)
		if err := l.Close(); err != nil {
			t.Fatalf("cycle %d: Close: %v", cycle, err)
		}
		if left := closedLeftovers(dir); len(left) > 0 {
			t.Fatalf("cycle %d: Close left %v", cycle, left)
		}
	}
	l := mustOpen(t, dir, o)
	if rec := l.Recovery(); !rec.Clean || len(rec.Notes) > 0 {
		t.Fatalf("the last reopen found %+v", rec)
	}
	for off := l.First(); off < l.Next(); off++ {
		checkRead(t, l, off, size(off))
	}
	return swaps, reused
}

// blockPrepared returns an allocate hook that, while armed, blocks the
// first allocation of a new prepared .log file (Prepare's, not a reused
// file's) until release is closed, and reports on entered when it blocks.
func blockPrepared(armed *atomic.Bool, entered chan<- struct{}, release <-chan struct{}) func(f *os.File, off, n int64) error {
	return func(f *os.File, off, n int64) error {
		if filepath.Base(f.Name()) == segment.PreparedPrefix+segment.LogSuffix && off == 0 && armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
		return mmapfile.Allocate(f, off, n)
	}
}

// The swap, made deterministic: the preparer is held in the middle of
// making a new file (its first allocation) when the oldest segment is
// dropped, so that the kept file comes while the new one is being made
// ("preparing"), or the preparer is let go first and the drop comes once
// the new file waits ("waiting"); in "roll", a roll takes the place of
// the new file while the preparer is held, so the kept file must become
// the segment after the next one. Each time: the new file gives way, the
// next roll (or the one after) writes into the dropped segment's file (its
// inode), the bound holds, every record reads back, and Close leaves
// nothing.
func TestRecycleSwapHeldPreparerGivesWayToKeptFile(t *testing.T) {
	for _, mode := range []string{"preparing", "waiting", "roll"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			var armed atomic.Bool
			entered, release := make(chan struct{}, 1), make(chan struct{})
			o := Options{SegmentBytes: 64 << 10, RecycleSegments: 1}
			o.allocate = blockPrepared(&armed, entered, release)
			l := mustOpen(t, dir, o)
			var once sync.Once
			let := func() { once.Do(func() { close(release) }) }
			t.Cleanup(let) // before the Close: a failed test lets the preparer go
			const size = 900
			app := func() {
				t.Helper()
				if _, err := l.Append(testBody(l.Next(), size)); err != nil {
					t.Fatal(err)
				}
			}
			rollOnce := func() {
				t.Helper()
				for base := l.active.Base(); l.active.Base() == base; {
					app()
				}
			}
			for len(*l.segs.Load()) < 3 {
				app()
			}
			// Let the preparer finish whatever it has started, then arm
			// the block for the next new file and go past the half.
			waitFor(t, "the preparer to be idle", func() bool { return !swapState(l).preparing })
			rollOnce()
			waitFor(t, "the preparer to be idle", func() bool { return !swapState(l).preparing })
			for i := 0; swapState(l).prepared; i++ {
				// Prepared after the roll by a kick still pending: roll
				// onto it, so the next preparation is the one held (a
				// loaded machine may leave a kick pending again).
				if i == 10 {
					t.Fatalf("the preparer kept a prepared file after %d rolls (%+v)", i, swapState(l))
				}
				rollOnce()
				waitFor(t, "the preparer to be idle", func() bool { return !swapState(l).preparing })
			}
			armed.Store(true)
			for l.active.End() < o.SegmentBytes*5/8 {
				app()
			}
			select {
			case <-entered:
			case <-time.After(time.Minute):
				t.Fatalf("the preparer never started a new file (%+v)", swapState(l))
			}
			oldest := (*l.segs.Load())[0]
			ino := fileInode(t, oldest.Path())
			drop := func() {
				t.Helper()
				if k, err := l.DropBefore((*l.segs.Load())[1].Base()); err != nil || k != 1 {
					t.Fatalf("DropBefore: %d, %v", k, err)
				}
			}
			switch mode {
			case "preparing":
				drop()
				if v := swapState(l); v.kept != 1 || !v.preparing || !v.fresh {
					t.Fatalf("the drop while a new file is being made: %+v, want the file kept", v)
				}
				let()
			case "waiting":
				let()
				waitFor(t, "the new file to wait", func() bool { v := swapState(l); return v.prepared && !v.preparing })
				drop()
			case "roll":
				drop()
				rollOnce() // nothing prepared: the roll makes its own segment
				let()
			}
			waitFor(t, "the kept file to replace the new one", func() bool {
				v := swapState(l)
				return v.settled() && v.prepared && !v.fresh && v.kept == 0
			})
			if got := fileInode(t, filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)); got != ino {
				t.Fatalf("the prepared file is inode %d, the dropped segment's was %d", got, ino)
			}
			if left := recycledFiles(t, dir); len(left) > 0 {
				t.Fatalf("kept files left beside the prepared one: %v", left)
			}
			rollOnce()
			if got := fileInode(t, l.active.Path()); got != ino {
				t.Fatalf("the segment after the roll is inode %d, the dropped segment's was %d", got, ino)
			}
			for off := l.First(); off < l.Next(); off++ {
				checkRead(t, l, off, size)
			}
			verifyHealthy(t, l, mode)
			closeLeavesNothing(t, l, "Close")
		})
	}
}

// Close while the preparer is held in the middle of making a new file, a
// dropped file kept meanwhile: Close waits for the preparer, which is let
// go 20 ms later; it returns nil and leaves no recycled-* or prepared.*
// file, and the reopen is clean with every record.
func TestRecycleSwapCloseWaitsForPreparer(t *testing.T) {
	for round := range 6 {
		dir := t.TempDir()
		var armed atomic.Bool
		entered, release := make(chan struct{}, 1), make(chan struct{})
		o := Options{SegmentBytes: 32 << 10, RecycleSegments: 1 + round%3}
		o.allocate = blockPrepared(&armed, entered, release)
		var once sync.Once
		let := func() { once.Do(func() { close(release) }) }
		l, err := Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(let) // a failed round lets the preparer go
		const size = 700
		for len(*l.segs.Load()) < 3 {
			if _, err := l.Append(testBody(l.Next(), size)); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the preparer to be idle", func() bool { return !swapState(l).preparing })
		armed.Store(true)
		for i := 0; ; i++ {
			select {
			case <-entered:
			default:
				if _, err := l.Append(testBody(l.Next(), size)); err != nil {
					t.Fatal(err)
				}
				if i > 1000 {
					t.Fatalf("round %d: the preparer never started a new file", round)
				}
				continue
			}
			break
		}
		// A reader holds a record of the segment dropped: its file is
		// handed on at the Release, after Close in odd rounds.
		r, err := l.Read(l.First())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.DropBefore((*l.segs.Load())[1].Base()); err != nil {
			t.Fatal(err)
		}
		if round%2 == 0 {
			r.Release()
		}
		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		time.Sleep(20 * time.Millisecond)
		let()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("round %d: Close: %v", round, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("round %d: Close did not return", round)
		}
		if round%2 == 1 {
			if !bytes.Equal(r.Body, testBody(r.Offset, size)) {
				t.Fatalf("round %d: the record held through Close changed", round)
			}
			r.Release()
		}
		if left := closedLeftovers(dir); len(left) > 0 {
			t.Fatalf("round %d: Close left %v", round, left)
		}
		l = mustOpen(t, dir, Options{})
		if rec := l.Recovery(); !rec.Clean || len(rec.Notes) > 0 {
			t.Fatalf("round %d: the reopen found %+v", round, rec)
		}
		for off := l.First(); off < l.Next(); off++ {
			checkRead(t, l, off, size)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Kept files tampered with while they wait: removed, cut to a few bytes,
// grown to three segments of garbage, or replaced by a file of garbage of
// a segment's size. The preparer takes them in turn (RecycleSegments 3,
// drops of three segments at a time): a file it cannot reuse is replaced
// by a new one, one it can is made zero whole. Appends never fail; every
// record reads back, before and after a reopen; Verify is healthy;
// nothing is left after Close.
func TestRecycleSwapTamperedKeptFilesReplacedOrZeroed(t *testing.T) {
	const segBytes = 64 << 10
	dir := t.TempDir()
	o := Options{SegmentBytes: segBytes, RecycleSegments: 3}
	l := mustOpen(t, dir, o)
	size := swapSize(segBytes)
	app := func(n int) {
		t.Helper()
		for range n {
			next := l.Next()
			if off, err := l.Append(testBody(next, size(next))); err != nil || off != next {
				t.Fatalf("Append: %d, %v", off, err)
			}
		}
	}
	garbage := func(n int64) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(crashMix(uint64(i)) | 1)
		}
		return b
	}
	tamper := []func(p string) error{
		os.Remove,
		func(p string) error { return os.Truncate(p, 5) },
		func(p string) error { // grown, in place
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteAt(garbage(3*segBytes+123), 0)
			return errors.Join(err, f.Close())
		},
		func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.WriteFile(p, garbage(segBytes), 0o600)
		},
	}
	tampered := 0
	for round := range 16 {
		for len(*l.segs.Load()) < 5 {
			app(20)
		}
		if _, err := l.DropBefore((*l.segs.Load())[3].Base()); err != nil {
			t.Fatal(err)
		}
		// Settled (no new prepared file beside a kept one), with no
		// append and no drop to come, the preparer takes no kept file
		// until the next half segment. (The directory may hold fewer
		// kept files than the log: some were removed.)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			v := swapState(l)
			if v.settled() {
				time.Sleep(2 * time.Millisecond)
				if swapState(l) == v {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the preparer never settled: %+v, kept files %v, prepared %v",
					round, v, recycledFiles(t, dir), preparedFiles(t, dir))
			}
		}
		for _, p := range recycledFiles(t, dir) {
			if err := tamper[tampered%len(tamper)](filepath.Join(dir, p)); err != nil {
				t.Fatal(err)
			}
			tampered++
		}
		app(60 + round*7)
		for off := l.First(); off < l.Next(); off++ {
			checkRead(t, l, off, size(off))
		}
	}
	if tampered < len(tamper) {
		t.Fatalf("only %d kept files tampered with", tampered)
	}
	verifyHealthy(t, l, "after the tampering")
	reused := l.Stats().Recycled
	closeLeavesNothing(t, l, "Close")
	l = mustOpen(t, dir, o)
	for off := l.First(); off < l.Next(); off++ {
		checkRead(t, l, off, size(off))
	}
	verifyHealthy(t, l, "reopened")
	t.Logf("%d kept files tampered with; %d segments reused", tampered, reused)
	if reused == 0 {
		t.Fatal("no tampered kept file was reused")
	}
}

// A log written with 256 KiB segments reopened with 4 KiB ones, dropping
// and reusing its old, larger files (and then back): a reused file larger
// than a segment is made zero whole, so no old record shows after the new
// ones, before or after a reopen or a crash; every record reads back and
// Verify is healthy.
func TestRecycleSwapLargerFileZeroedWhole(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			size := func(off uint64) int { return mixedSize(off) % 900 }
			l := mustOpen(t, dir, Options{SegmentBytes: 256 << 10})
			appendN(t, l, 2000, size)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			for i, sb := range []int64{4 << 10, 256 << 10, 4 << 10} {
				o := Options{SegmentBytes: sb, RecycleSegments: 1 + i}
				l = mustOpen(t, dir, o)
				// 30 rounds, and more while nothing was reused: whether a
				// roll finds the kept file or a file the preparer made
				// first depends on timing (two rolls of 256 KiB segments
				// on a loaded machine once reused none).
				for round := 0; round < 30 || l.Stats().Recycled == 0 && round < 300; round++ {
					appendN(t, l, 40, size)
					if _, err := l.DropBefore(l.Next() - min(l.Next(), uint64(100+round))); err != nil {
						t.Fatal(err)
					}
				}
				if l.Stats().Recycled == 0 {
					t.Fatalf("SegmentBytes %d: nothing reused", sb)
				}
				for off := l.First(); off < l.Next(); off++ {
					checkRead(t, l, off, size(off))
				}
				verifyHealthy(t, l, fmt.Sprintf("SegmentBytes %d", sb))
				if crash {
					crashClose(t, l)
				} else if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = mustOpen(t, dir, o)
				rec := l.Recovery()
				if !crash && (!rec.Clean || len(rec.Notes) > 0) {
					t.Fatalf("SegmentBytes %d: the reopen after Close found %+v", sb, rec)
				}
				if len(rec.Active.Damaged) > 0 {
					t.Fatalf("SegmentBytes %d: the reopen found damage: %+v", sb, rec.Active)
				}
				for off := l.First(); off < l.Next(); off++ {
					checkRead(t, l, off, size(off))
				}
				verifyHealthy(t, l, fmt.Sprintf("SegmentBytes %d, reopened", sb))
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A full file system (a small tmpfs) while segments are dropped and their
// files kept and swapped in: appends fail with ENOSPC only, write nothing
// when they fail, and go on once drops free room or a kept file serves as
// the next segment; every acknowledged record from First reads back;
// Close leaves no recycled-* or prepared.* file and the reopen reads them
// all.
func TestRecycleSwapFullDiskAppendsResume(t *testing.T) {
	fsdir := mountTmpfs(t, "3m")
	for spare := 1; spare <= 3; spare++ {
		dir := filepath.Join(fsdir, fmt.Sprint("log", spare))
		ballast := filepath.Join(fsdir, "ballast")
		o := Options{SegmentBytes: 256 << 10, RecycleSegments: spare, MaxRecordBytes: 16 << 10}
		l, err := Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		// Leave room for the active segment, a sealed one and half a
		// segment per spare file: kept files count as the log's disk
		// until reused (the prepared one is one of them), and an append
		// that finds the disk full removes them and takes their space, so
		// with room for whole spare files the disk never filled.
		var st syscall.Statfs_t
		if err := syscall.Statfs(fsdir, &st); err != nil {
			t.Fatal(err)
		}
		room := 2*o.SegmentBytes + int64(spare)*o.SegmentBytes/2
		if free := int64(st.Bavail) * int64(st.Bsize); free > room {
			if err := os.WriteFile(ballast, make([]byte, free-room), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		size := func(off uint64) int { return 200 + int(crashMix(off)%3000) }
		full, dropped := 0, 0
		var stuckSince time.Time
		// 6000 appends, and on until a kept file was reused and the disk
		// filled (a minute at most): on a loaded machine the preparer
		// may not get to a kept file before the rolls, drop after drop.
		deadline := time.Now().Add(time.Minute)
		for i := 0; i < 6000 || (full == 0 || l.Stats().Recycled == 0) && time.Now().Before(deadline); i++ {
			next := l.Next()
			off, err := l.Append(testBody(next, size(next)))
			switch {
			case err == nil && off != next:
				t.Fatalf("spare %d: Append at %d: %d", spare, next, off)
			case err != nil && !errors.Is(err, syscall.ENOSPC):
				t.Fatalf("spare %d: Append at %d: %v, want ENOSPC", spare, next, err)
			case err != nil:
				full++
				if l.Next() != next {
					t.Fatalf("spare %d: a failed append moved Next from %d to %d", spare, next, l.Next())
				}
				if stuckSince.IsZero() {
					stuckSince = time.Now()
				} else if time.Since(stuckSince) > 3*time.Second {
					ents, _ := os.ReadDir(dir)
					var names []string
					for _, e := range ents {
						if fi, err := e.Info(); err == nil {
							names = append(names, fmt.Sprintf("%s (%d)", e.Name(), fi.Size()))
						}
					}
					t.Fatalf("spare %d: every append refused for 3 s (%v): reuse state %+v, %d segments; the directory: %v",
						spare, err, swapState(l), len(*l.segs.Load()), names)
				}
				time.Sleep(time.Millisecond) // an appender backs off
			default:
				stuckSince = time.Time{}
			}
			// Drops that keep about two segments, at every phase; after
			// an ENOSPC, of every sealed segment.
			if err != nil || i%97 == 0 {
				to := l.Next() - min(l.Next(), 2*uint64(o.SegmentBytes)/1800)
				if err != nil {
					to = l.Next()
				}
				if k, err := l.DropBefore(to); err != nil {
					t.Fatalf("spare %d: DropBefore: %v", spare, err)
				} else {
					dropped += k
				}
			}
		}
		if full == 0 {
			t.Errorf("spare %d: the file system never filled", spare)
		}
		for off := l.First(); off < l.Next(); off++ {
			checkRead(t, l, off, size(off))
		}
		verifyHealthy(t, l, fmt.Sprintf("spare %d", spare))
		reused := l.Stats().Recycled
		// Room for Close's clean marker (a full disk fails Close, and the
		// next open recovers).
		_ = os.Remove(ballast)
		if err := l.Close(); err != nil {
			t.Fatalf("spare %d: Close: %v", spare, err)
		}
		if left := closedLeftovers(dir); len(left) > 0 {
			t.Fatalf("spare %d: Close left %v", spare, left)
		}
		l, err = Open(dir, o)
		if err != nil {
			t.Fatalf("spare %d: reopen: %v", spare, err)
		}
		for off := l.First(); off < l.Next(); off++ {
			checkRead(t, l, off, size(off))
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		t.Logf("spare %d: %d appends refused, %d segments dropped, %d reused", spare, full, dropped, reused)
		if full == 0 || reused == 0 {
			t.Fatalf("spare %d: %d appends refused, %d segments reused: the disk never filled beside a reuse", spare, full, reused)
		}
	}
}

// Environment of TestRecycleSwapKillChild.
const (
	swapEnvDir    = "PAGELOG_RECYCLE_SWAP_DIR"
	swapEnvSalt   = "PAGELOG_RECYCLE_SWAP_SALT"
	swapEnvSpare  = "PAGELOG_RECYCLE_SWAP_SPARE"
	swapEnvPolicy = "PAGELOG_RECYCLE_SWAP_POLICY"
)

func swapCrashOptions(spare int, p SyncPolicy) Options {
	o := crashKillOptions(p)
	o.SegmentBytes = 32 << 10
	o.RecycleSegments = spare
	o.SyncInterval = time.Millisecond
	return o
}

// kill -9 of a process whose drops come once the preparer has made the
// next segment as a new file (past the half of the active segment), one
// segment at a time, with a reader holding records so that some files are
// handed on at its Release: the kill lands in the swap (the new file
// removed, the kept file renamed, zeroed, mapped), in a drop or a roll.
// After each: Open succeeds, leaves no recycled-* or prepared.* file,
// recovers every acknowledged record from First (which passes no drop
// asked for) byte for byte with no damage, Verify is healthy, appends go
// on, and Close leaves no recycled-* or prepared.* file.
func TestRecycleSwapKillRecoversAcknowledged(t *testing.T) {
	seed := crashSeedFor(t)
	rng := crashRand(seed, 11)
	dir := t.TempDir()
	rounds := max(*crashRounds/4, 12)
	var (
		writers      []crashWriter
		start, first uint64
		acks, reuses int
	)
	want := func(off uint64) []byte { return crashBody(off, crashSaltAt(writers, off), 8, 2008) }
	for round := range rounds {
		salt := uint64(round)*2 + 1
		writers = append(writers, crashWriter{start: start, salt: salt})
		spare := 1 + rng.IntN(3)
		policy := []SyncPolicy{SyncNone, SyncInterval}[rng.IntN(2)]
		afterAcks, delay := -1, time.Duration(0)
		if rng.IntN(2) == 0 {
			afterAcks = rng.IntN(3000)
		} else {
			delay = time.Duration(rng.IntN(300_000)) * time.Microsecond
		}
		res, dropAsked, reused := swapRunChild(t, dir, salt, spare, policy, afterAcks, delay)
		reuses += reused
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("round %d (spare %d, %v, kill after %d acks / %v, seed %d): %s\nchild stderr:\n%s",
				round, spare, policy, afterAcks, delay, seed, fmt.Sprintf(format, args...), res.stderr)
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
		o := swapCrashOptions(spare, policy)
		l, err := Open(dir, o)
		if err != nil {
			fail("Open after the kill: %v", err)
		}
		if left := closedLeftoversAfterOpen(dir); len(left) > 0 {
			_ = l.Close()
			fail("left after the open: %v (notes %q)", left, l.Recovery().Notes)
		}
		rec, next := l.Recovery(), l.Next()
		switch {
		case next < start+uint64(len(res.acks)):
			fail("Next %d after %d acknowledged appends from %d: acknowledged records lost (recovery %+v)", next, len(res.acks), start, rec.Active)
		case len(rec.Active.Damaged) > 0:
			fail("recovery reports damage after a process kill: %+v", rec.Active)
		case l.First() < first:
			fail("First went back from %d to %d", first, l.First())
		case l.First() > max(first, dropAsked):
			fail("First is %d; no drop asked past %d: records dropped that were to be kept", l.First(), max(first, dropAsked))
		}
		first = l.First()
		if msg := crashCheckRange(l, first, next, want); msg != "" {
			fail("%s (recovery %+v)", msg, rec.Active)
		}
		v, err := l.Verify(nil)
		if err != nil || !v.Healthy() || v.Records != next-first {
			fail("Verify: %v, %d records of [%d, %d), problems %q %q", err, v.Records, first, next, v.Problems, v.IndexProblems)
		}
		writers = append(writers, crashWriter{start: next, salt: salt + 1})
		if off, err := l.Append(want(next)); err != nil || off != next {
			fail("Append after recovery: offset %d, %v; want %d", off, err, next)
		}
		if err := l.Close(); err != nil {
			fail("Close: %v", err)
		}
		if left := closedLeftovers(dir); len(left) > 0 {
			fail("left after Close: %v", left)
		}
		start = next + 1
	}
	t.Logf("%d rounds: %d acknowledged records checked, %d records in all, %d segments made from kept files (as the children reported last)",
		rounds, acks, start, reuses)
	if reuses == 0 {
		t.Fatal("no child made a segment from a kept file: the kills missed the swap")
	}
}

// swapRunChild runs TestRecycleSwapKillChild on dir and kills it after
// afterAcks acknowledgements (when >= 0) or delay after its open. It
// returns what the child reported and the highest offset it asked a drop
// to keep.
func swapRunChild(t *testing.T, dir string, salt uint64, spare int, policy SyncPolicy, afterAcks int, delay time.Duration) (res crashChildResult, dropAsked uint64, reused int) {
	t.Helper()
	cmd := testkit.Child("TestRecycleSwapKillChild")
	cmd.Env = append(os.Environ(),
		swapEnvDir+"="+dir,
		swapEnvSalt+"="+strconv.FormatUint(salt, 10),
		swapEnvSpare+"="+strconv.Itoa(spare),
		swapEnvPolicy+"="+policy.String())
	out, stderr := testkit.StartChild(t, cmd)
	res = crashChildResult{beforeOpen: true}
	var once sync.Once
	kill := func() { once.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL) }) }
	hang := time.AfterFunc(time.Minute, kill)
	defer hang.Stop()
	var timer *time.Timer
	for line := range testkit.Lines(out, 256) {
		crashParseLine(line, &res)
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "D":
			n, _ := strconv.ParseUint(f[1], 10, 64)
			dropAsked = max(dropAsked, n)
		case len(f) == 2 && f[0] == "R":
			reused, _ = strconv.Atoi(f[1])
		case len(f) > 0 && f[0] == "O" && afterAcks == 0:
			kill()
		case len(f) > 0 && f[0] == "O" && afterAcks < 0:
			timer = time.AfterFunc(delay, kill)
		case len(f) > 0 && f[0] == "A" && afterAcks > 0 && len(res.acks) >= afterAcks:
			kill()
		}
	}
	if timer != nil {
		timer.Stop()
	}
	kill()
	_ = cmd.Wait()
	res.stderr = stderr.String()
	return res, dropAsked, reused
}

// TestRecycleSwapKillChild is the child of
// TestRecycleSwapKillRecoversAcknowledged: it does nothing unless started
// by it. It prints "O <next>", appends records (printing "A <offset>" for
// each), and once per segment, past 5/8 of it with three segments or more,
// prints "D <offset>" and drops the oldest segment; a reader holds a few
// records at a time.
func TestRecycleSwapKillChild(t *testing.T) {
	dir := os.Getenv(swapEnvDir)
	if dir == "" {
		return
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		outMu.Unlock()
	}
	die := func(format string, args ...any) {
		say("E "+format, args...)
		os.Exit(2)
	}
	salt, err1 := strconv.ParseUint(os.Getenv(swapEnvSalt), 10, 64)
	spare, err2 := strconv.Atoi(os.Getenv(swapEnvSpare))
	if err1 != nil || err2 != nil {
		die("settings: %v %v", err1, err2)
	}
	policy := SyncNone
	if os.Getenv(swapEnvPolicy) == SyncInterval.String() {
		policy = SyncInterval
	}
	o := swapCrashOptions(spare, policy)
	l, err := Open(dir, o)
	if err != nil {
		die("Open: %v", err)
	}
	say("O %d", l.Next())
	go func() { // a reader holding records across drops
		var held []Record
		for i := uint64(0); ; i++ {
			first, next := l.First(), l.Next()
			if next > first {
				if r, err := l.Read(first + crashMix(i)%(next-first)); err == nil {
					held = append(held, r)
				}
			}
			if len(held) > 4 {
				held[0].Release()
				held = held[1:]
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	dropped := uint64(math.MaxUint64)
	for {
		want := l.Next()
		off, err := l.Append(crashBody(want, salt, 8, 2008))
		if err != nil || off != want {
			die("Append: offset %d, %v; want %d", off, err, want)
		}
		say("A %d", off)
		segs := *l.segs.Load()
		active := segs[len(segs)-1]
		if len(segs) >= 3 && active.Base() != dropped && active.End() > o.SegmentBytes*5/8 {
			dropped = active.Base()
			p := segs[1].Base()
			say("D %d", p)
			if _, err := l.DropBefore(p); err != nil {
				die("DropBefore(%d): %v", p, err)
			}
			say("R %d", l.Stats().Recycled)
		}
	}
}

// A kept file the preparer cannot reuse (an index file of it finds the
// disk full) is removed and the segment made new; a second kept file
// still waits. The preparer settles: the new prepared file gives way to
// the other kept file, as it does when a kept file comes after it, and
// the next roll writes into that file. (Before 9214f78 the new file
// stayed, not faulted in, until the next roll took it.)
func TestRecycleSwapFailedReuseGivesWayToOtherKept(t *testing.T) {
	dir := t.TempDir()
	var failIndex atomic.Bool
	o := Options{SegmentBytes: 64 << 10, RecycleSegments: 3}
	o.allocate = func(f *os.File, off, n int64) error {
		if filepath.Base(f.Name()) == segment.PreparedPrefix+segment.IndexSuffix && failIndex.CompareAndSwap(true, false) {
			return syscall.ENOSPC
		}
		return mmapfile.Allocate(f, off, n)
	}
	l := mustOpen(t, dir, o)
	const size = 900
	app := func() {
		t.Helper()
		if _, err := l.Append(testBody(l.Next(), size)); err != nil {
			t.Fatal(err)
		}
	}
	pastHalf := func() {
		t.Helper()
		for l.active.End() < o.SegmentBytes*5/8 {
			app()
		}
	}
	rollOnce := func() {
		t.Helper()
		for base := l.active.Base(); l.active.Base() == base; {
			app()
		}
	}
	dropOldest := func() {
		t.Helper()
		if k, err := l.DropBefore((*l.segs.Load())[1].Base()); err != nil || k != 1 {
			t.Fatalf("DropBefore: %d, %v", k, err)
		}
	}
	for len(*l.segs.Load()) < 5 {
		app()
	}
	pastHalf()
	waitFor(t, "a new file prepared", func() bool { v := swapState(l); return v.settled() && v.prepared && v.fresh })
	dropOldest()
	waitFor(t, "the kept file prepared", func() bool { v := swapState(l); return v.settled() && v.spare == 1 && v.kept == 0 })
	dropOldest()
	dropOldest()
	if v := swapState(l); v.kept != 2 || v.spare != 1 {
		t.Fatalf("after three drops: %+v, want two kept and one reused prepared", v)
	}
	inos := map[uint64]bool{}
	for _, f := range recycledFiles(t, dir) {
		inos[fileInode(t, filepath.Join(dir, f))] = true
	}
	failIndex.Store(true)
	rollOnce() // takes the reused prepared segment
	pastHalf() // the preparer takes a kept file, fails, makes a new one, then swaps
	waitFor(t, "the failed reuse", func() bool { return !failIndex.Load() })
	deadline := time.Now().Add(time.Minute)
	for v := swapState(l); !v.settled() || v.kept > 0 || v.spare != 1; v = swapState(l) {
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the failed reuse: %+v (kept %v, prepared %v); want the other kept file prepared",
				v, recycledFiles(t, dir), preparedFiles(t, dir))
		}
		time.Sleep(time.Millisecond)
	}
	if got := fileInode(t, filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)); !inos[got] {
		t.Fatalf("the prepared file is inode %d, not one of the kept files %v", got, inos)
	}
	rollOnce()
	if got := fileInode(t, l.active.Path()); !inos[got] {
		t.Fatalf("the segment after the roll is inode %d, not one of the kept files %v", got, inos)
	}
	for off := l.First(); off < l.Next(); off++ {
		checkRead(t, l, off, size)
	}
	closeLeavesNothing(t, l, "Close")
}
