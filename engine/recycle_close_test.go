package engine

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRecycleCloseRacingDropsLeavesNoFiles: Close racing appends, drops and
// readers that hold records of dropped segments (their files are handed to
// the recycler only when the last record goes, some after Close), with
// RecycleSegments 1 to 3. Close succeeds; once the records are released
// no recycled-* or prepared.* file and no index file without its .log is
// left; the reopen is clean with no note and every record reads back.
func TestRecycleCloseRacingDropsLeavesNoFiles(t *testing.T) {
	deadline := time.Now().Add(4 * time.Second)
	rounds := 0
	for ; rounds < 60 && time.Now().Before(deadline); rounds++ {
		rng := rand.New(rand.NewPCG(uint64(rounds), 11))
		dir := t.TempDir()
		opts := Options{SegmentBytes: 4096, RecycleSegments: 1 + rounds%3}
		l := mustOpen(t, dir, opts)
		appendN(t, l, 100, func(uint64) int { return 100 })
		var stop atomic.Bool
		var wg sync.WaitGroup
		var mu sync.Mutex
		var held []Record
		errs := make(chan error, 4)
		wg.Add(2)
		go func() { // appends and drops
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if i%10 == 9 {
					if _, err := l.DropBefore(l.Next() - 40); err != nil && !errors.Is(err, ErrClosed) {
						errs <- err
						return
					}
					continue
				}
				if _, err := l.Append(make([]byte, 100+i%300)); err != nil {
					if !errors.Is(err, ErrClosed) {
						errs <- err
					}
					return
				}
			}
		}()
		go func() { // holds records of segments about to be dropped
			defer wg.Done()
			rr := rand.New(rand.NewPCG(uint64(rounds), 12))
			for !stop.Load() {
				r, err := l.Read(l.First())
				if err != nil {
					continue
				}
				mu.Lock()
				held = append(held, r)
				if len(held) > 6 {
					k := rr.IntN(len(held))
					held[k].Release()
					held = append(held[:k], held[k+1:]...)
				}
				mu.Unlock()
			}
		}()
		time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
		if err := l.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", rounds, err)
		}
		stop.Store(true)
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatalf("round %d: %v", rounds, err)
		default:
		}
		mu.Lock()
		for _, r := range held { // after Close: their files go at once
			r.Release()
		}
		held = nil
		mu.Unlock()
		if left := orphanIndexFiles(t, dir); len(left) > 0 {
			t.Fatalf("round %d: left after Close and the last Release: %q", rounds, left)
		}
		l = mustOpen(t, dir, opts)
		if rec := l.Recovery(); !rec.Clean || len(rec.Notes) > 0 {
			t.Fatalf("round %d: the reopen found %+v", rounds, rec)
		}
		for off := l.First(); off < l.Next(); off++ {
			r, err := l.Read(off)
			if err != nil {
				t.Fatalf("round %d: Read(%d): %v", rounds, off, err)
			}
			r.Release()
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds", rounds)
}

// TestRecycleCloseOnFullDiskWithThreeKept: a full disk while three dropped
// files are kept for reuse, and a reader holding a record of a segment
// dropped after that: Close succeeds and writes log.clean; the held
// record still reads after Close; once released, nothing kept is left.
func TestRecycleCloseOnFullDiskWithThreeKept(t *testing.T) {
	fsdir := mountTmpfs(t, "4m")
	dir := filepath.Join(fsdir, "log")
	opts := Options{SegmentBytes: 128 << 10, RecycleSegments: 3}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 1000)
	for l.Stats().Segments < 8 {
		if _, err := l.Append(body); err != nil {
			t.Fatal(err)
		}
	}
	segs := *l.segs.Load()
	if _, err := l.DropBefore(segs[3].Base()); err != nil {
		t.Fatal(err)
	}
	held, err := l.Read(segs[3].Base())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.DropBefore(segs[5].Base()); err != nil {
		t.Fatal(err)
	}
	for wait := time.Now().Add(time.Minute); !hasRecycled(t, dir); {
		if time.Now().After(wait) {
			t.Fatal("no dropped file was kept for reuse")
		}
		time.Sleep(time.Millisecond)
	}
	ballast := fillDisk(t, fsdir)
	if err := l.Close(); err != nil {
		t.Fatalf("Close on a full disk with kept files: %v", err)
	}
	if len(held.Body) != len(body) || held.Offset != segs[3].Base() {
		t.Fatalf("the held record after Close: offset %d, %d bytes", held.Offset, len(held.Body))
	}
	held.Release()
	if left := orphanIndexFiles(t, dir); len(left) > 0 {
		t.Fatalf("left after Close and the last Release: %q", left)
	}
	if err := os.Truncate(ballast, 0); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, opts)
	if rec := l.Recovery(); !rec.Clean || len(rec.Notes) > 0 {
		t.Fatalf("the reopen found %+v", rec)
	}
}
