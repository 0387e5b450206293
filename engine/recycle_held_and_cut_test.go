package engine

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Records held while their segments are dropped and their files reused keep
// their bytes: an appender rolls, a dropper drops everything below the
// active segment, readers hold records across several drops and check them
// before releasing; the log is closed with records still held, which are
// checked and released after Close. Nothing kept for reuse is left.
func TestRecycleHeldRecordsAcrossDropsAndClose(t *testing.T) {
	for _, recycle := range []int{1, 3} {
		dir := t.TempDir()
		l := mustOpen(t, dir, Options{SegmentBytes: 32 << 10, RecycleSegments: recycle})
		const size = 700
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // appender and dropper
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				off := l.Next()
				if _, err := l.Append(testBody(off, size)); err != nil {
					t.Error(err)
					return
				}
				if i%40 == 0 {
					if _, err := l.DropBefore(l.Next()); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
		type held struct {
			r    Record
			want []byte
		}
		var lastHeld []held
		var mu sync.Mutex
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var hs []held
				for k := 0; !stop.Load() && !t.Failed(); k++ {
					off := l.First() + uint64(k%5)
					r, err := l.Read(off)
					if err != nil {
						continue // dropped meanwhile
					}
					if r.Offset != off || !bytes.Equal(r.Body, testBody(off, size)) {
						t.Errorf("Read(%d) served another record", off)
					}
					hs = append(hs, held{r, testBody(off, size)})
					if len(hs) > 8 {
						h := hs[0]
						hs = hs[1:]
						if !bytes.Equal(h.r.Body, h.want) {
							t.Errorf("held record %d changed", h.r.Offset)
						}
						h.r.Release()
					}
				}
				mu.Lock()
				lastHeld = append(lastHeld, hs...)
				mu.Unlock()
			}()
		}
		for !t.Failed() && l.Next() < 2000 {
			runtime.Gosched()
		}
		stop.Store(true)
		wg.Wait()

		if st := l.Stats(); st.Recycled == 0 {
			t.Errorf("RecycleSegments %d: no file reused", recycle)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for _, h := range lastHeld {
			if !bytes.Equal(h.r.Body, h.want) {
				t.Errorf("record %d held through Close changed", h.r.Offset)
			}
			h.r.Release()
		}
		if left := recycledFiles(t, dir); len(left) != 0 {
			t.Fatalf("RecycleSegments %d: files kept for reuse after Close and the last release: %v", recycle, left)
		}
		if left := preparedFiles(t, dir); len(left) != 0 {
			t.Fatalf("prepared files after Close: %v", left)
		}
	}
}

// Truncate after reused files became segments: records after the cut never
// come back (before or after a reopen), and appends after it get the
// offsets from the cut on.
func TestRecycleTruncateReusedSegments(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 32 << 10, RecycleSegments: 2}
	l := mustOpen(t, dir, o)
	const size = 700
	n := uint64(0)
	app := func(k int) {
		for range k {
			if _, err := l.Append(testBody(n, size)); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	for round := 0; l.Stats().Recycled < 4; round++ {
		app(60)
		if _, err := l.DropBefore(l.Next() - 10); err != nil {
			t.Fatal(err)
		}
		if round > 1000 {
			t.Fatal("no reuse")
		}
	}
	app(100)
	// Cut inside the sealed segment before the active one, then write
	// other bodies at the cut offsets.
	segs := *l.segs.Load()
	cut := segs[len(segs)-2].Base() + 3
	if err := l.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	if l.Next() != cut {
		t.Fatalf("Next %d after Truncate(%d)", l.Next(), cut)
	}
	const size2 = 300 // other bodies: a record from before the cut never compares equal
	for k := range uint64(80) {
		off, err := l.Append(testBody(cut+k, size2))
		if err != nil || off != cut+k {
			t.Fatalf("Append after Truncate: %d, %v; want %d", off, err, cut+k)
		}
	}
	end := cut + 80
	check := func(l *Log) {
		t.Helper()
		if l.Next() != end {
			t.Fatalf("Next %d, want %d", l.Next(), end)
		}
		for off := l.First(); off < end; off++ {
			want := size
			if off >= cut {
				want = size2
			}
			checkRead(t, l, off, want)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, o)
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if left := recycledFiles(t, dir); len(left) != 0 {
		t.Fatalf("files kept for reuse after Close: %v", left)
	}
}
