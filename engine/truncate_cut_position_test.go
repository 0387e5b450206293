package engine

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// Truncate holds a reference on the sealed segment it reads the record
// before the cut from (cutPosition): with MaxMappedSegments, readers
// mapping other segments meanwhile must not evict it under that read.
// Without the reference the read faulted (SIGSEGV in
// segment.(*Segment).holds / record.Header).
func TestTruncateCutPositionHoldsSegment(t *testing.T) {
	l := reopenOneMapped(t, 3000)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for !stop.Load() {
				if n := l.Next(); n > 0 {
					if r, err := l.Read(rng.Uint64N(n)); err == nil {
						r.Release()
					}
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 120 && l.Next() > 100; i++ {
		if err := l.Truncate(l.Next() - 1 - rng.Uint64N(8)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
}
