package sparseidx

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentReaders backs the package doc under -race: one writer puts
// entries and then publishes n; readers look up only among the first n they
// loaded, while the writer keeps writing beyond.
func TestConcurrentReaders(t *testing.T) {
	const total = 5000
	off := Offsets{Buf: make([]byte, total*OffsetEntrySize)}
	tim := Times{Buf: make([]byte, total*TimeEntrySize)}
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		spawn(&wg, func() {
			for {
				k := int(n.Load())
				if k > 0 {
					want := uint32(k) * 3 // the last published rel
					if i, rel, pos, ok := off.Floor(k, want+1); !ok || i != k-1 || rel != want || pos != want*4100 {
						t.Errorf("n=%d: Floor = %d, %d, %d, %v", k, i, rel, pos, ok)
						return
					}
					if i := tim.FirstAtOrAfter(k, int64(k)); i != k-1 {
						t.Errorf("n=%d: FirstAtOrAfter = %d", k, i)
						return
					}
				}
				if k == total {
					return
				}
			}
		})
	}
	for i := range total {
		rel := uint32(i+1) * 3
		if err := off.Put(i, rel, rel*4100); err != nil {
			t.Fatal(err)
		}
		if err := tim.Put(i, int64(i+1), rel); err != nil {
			t.Fatal(err)
		}
		n.Store(int64(i + 1))
	}
	wg.Wait()
}

// spawn runs f on a new goroutine counted by wg.
func spawn(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}
