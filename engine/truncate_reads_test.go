package engine

import (
	"sync"
	"sync/atomic"
	"testing"
)

// A Read of a record below the cut, racing the Truncate that cuts inside
// its segment, finds the record: the segment stays in the list, readable,
// until its copy below the cut replaces it. It used to leave the list for
// the copy and its sync, and reads meanwhile got ErrNotFound for records
// the log kept (a raft log store reading entries while it drops a
// conflicting tail).
func TestTruncateKeepsRecordsBelowCutReadable(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 1 << 20, Sync: policy})
			defer l.Close()
			appendN(t, l, 600, func(uint64) int { return 1000 }) // one segment, then a second
			base := l.active.Base()
			for l.active.Base() == base {
				appendN(t, l, 1, func(uint64) int { return 1000 })
			}
			base = l.active.Base()
			appendN(t, l, 50, func(uint64) int { return 1000 })
			// Cut inside the first segment (sealed), then twice inside it
			// again (active), while readers read records below each cut.
			cuts := []uint64{base - 20, base - 40, base - 60}
			var failed atomic.Pointer[error]
			for _, cut := range cuts {
				var stop atomic.Bool
				var wg sync.WaitGroup
				for r := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := uint64(0); !stop.Load(); i++ {
							off := cut - 1 - (i*7+uint64(r))%(cut-1)
							rec, err := l.Read(off)
							if err != nil {
								failed.CompareAndSwap(nil, &err)
								return
							}
							rec.Release()
						}
					}()
				}
				if err := l.Truncate(cut); err != nil {
					t.Fatal(err)
				}
				stop.Store(true)
				wg.Wait()
				if err := failed.Load(); err != nil {
					t.Fatalf("a Read below the cut at %d, beside the Truncate: %v", cut, *err)
				}
				if l.Next() != cut {
					t.Fatalf("Next %d after Truncate(%d)", l.Next(), cut)
				}
			}
		})
	}
}
