package engine

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A segment evicted from the mapping cache just after a drop let go of it
// is finished outside the cache's lock: finishing it under the lock took
// the lock again, and the goroutine, and every drop and mapping after it,
// waited forever. Reads map the segments of a reopened log (past
// MaxMappedSegments, so each mapping evicts) while drops take them.
func TestMapCacheEvictionRacingDrop(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 4096, MaxMappedSegments: 2}
	l := mustOpen(t, dir, o)
	for len(*l.segs.Load()) < 2000 {
		if _, err := l.Append(testBody(l.Next(), 700)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, o) // sealed segments are mapped when first read
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // maps the segments one after the other, from the oldest
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, err := range l.Records(l.First()) {
				if err != nil {
					break
				}
			}
		}
	}()
	dropped := make(chan struct{})
	var drops atomic.Int64
	go func() {
		defer close(dropped)
		for ; ; drops.Add(1) {
			p, ok := l.DropPoint()
			if !ok || len(*l.segs.Load()) < 3 {
				return
			}
			if _, err := l.DropBefore(p); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for last := int64(-1); ; {
		select {
		case <-dropped:
		case <-time.After(2 * time.Second):
			if n := drops.Load(); n != last {
				last = n
				continue
			}
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			var stuck []string
			for _, g := range strings.Split(stacks, "\n\n") {
				if strings.Contains(g, "MapCache).remove") {
					stuck = append(stuck, g)
				}
			}
			t.Fatalf("the drops stopped after %d: %d goroutines wait on the map cache's lock:\n%s", drops.Load(), len(stuck), strings.Join(stuck, "\n\n"))
		}
		break
	}
	close(done)
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
