package engine

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sparesIn lists the spare files of dir: kept for reuse, and prepared.
func sparesIn(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for _, pat := range []string{recycledPrefix + "*", "prepared.*"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			names = append(names, filepath.Base(p))
		}
	}
	return names
}

// ReleaseSpares removes the kept and prepared files; the log goes on
// rolling (making its next segments itself or from files kept later),
// and every record stays readable.
func TestReleaseSpares(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 3})
	fillGenerationSegments(t, l, 8)
	if _, err := l.DropBefore((*l.segs.Load())[4].Base()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); len(sparesIn(t, dir)) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no spare files: %v", sparesIn(t, dir))
		}
	}
	before := sparesIn(t, dir)
	n := l.ReleaseSpares()
	if n == 0 {
		t.Fatalf("ReleaseSpares removed nothing of %v", before)
	}
	// A dropped file is kept only once the last reference to its segment
	// is gone (a seal or an eviction may hold one for a moment): one
	// renamed but not yet kept is removed by a later call. Only a
	// prepared segment being made may stay longer.
	for deadline := time.Now().Add(time.Minute); hasRecycled(t, dir); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ReleaseSpares: %d removed, %v left of %v", n, sparesIn(t, dir), before)
		}
		n += l.ReleaseSpares()
	}
	first := l.First()
	fillGenerationSegments(t, l, len(*l.segs.Load())+6)
	checkGenerationRecordsFrom(t, l, first)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := l.ReleaseSpares(); n != 0 {
		t.Fatalf("ReleaseSpares after Close: %d", n)
	}
	if left := sparesIn(t, dir); len(left) != 0 {
		t.Fatalf("spare files after Close: %v", left)
	}
}

// ReleaseSpares beside appends that roll and drops that keep files, and
// against Close: nothing faults, and the log reopens whole.
func TestReleaseSparesBesideRolls(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4 << 10, RecycleSegments: 2}
	l := mustOpen(t, dir, opts)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var released atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			released.Add(int64(l.ReleaseSpares()))
			time.Sleep(50 * time.Microsecond)
		}
	}()
	deadline := time.Now().Add(500 * time.Millisecond)
	for i := 0; time.Now().Before(deadline) || i < 2000; i++ {
		off := l.Next()
		if _, err := l.Append(generationBody(off, 0)); err != nil {
			t.Fatalf("Append(%d): %v", off, err)
		}
		if i%100 == 99 {
			if segs := *l.segs.Load(); len(segs) > 4 {
				if _, err := l.DropBefore(segs[len(segs)-3].Base()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	next := l.Next()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d spare files released beside the rolls", released.Load())
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	r := mustOpen(t, dir, opts)
	if r.Next() != next {
		t.Fatalf("reopened at %d, want %d", r.Next(), next)
	}
	checkGenerationRecordsFrom(t, r, r.First())
}
