package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// TestDedupWindowReopenManySegments: ids sent over many small
// segments are remembered after a reopen whose log maps one or two sealed
// segments at a time (the window is rebuilt through OffsetForTime, which
// passes over sealed segments on their time index's end): a second send
// of each id appends nothing and returns the first send's offset, in the
// first open after the sends and in the next one too.
func TestDedupWindowReopenManySegments(t *testing.T) {
	for _, maps := range []int{1, 2} {
		t.Run(fmt.Sprint(maps), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{DedupWindow: time.Hour}
			opts.Log = engine.Options{SegmentBytes: 4096, IndexIntervalBytes: 256}
			q, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			const n = 1500
			first := make([]uint64, n)
			for i := range n {
				if first[i], err = q.SendWith(fmt.Appendf(nil, "message %d %0100d", i, i), SendOptions{DedupID: fmt.Sprint("id-", i)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			opts.Log.MaxMappedSegments = maps
			for reopen := range 2 {
				start := time.Now()
				q, err = Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				if got := q.Recovery().DedupIDs; got != n {
					t.Fatalf("reopen %d (%v): %d ids remembered, want %d", reopen, took, got, n)
				}
				for i := n - 1; i >= 0; i -= 7 {
					off, err := q.SendWith([]byte("again"), SendOptions{DedupID: fmt.Sprint("id-", i)})
					if err != nil || off != first[i] {
						t.Fatalf("reopen %d: a second send of id-%d: offset %d, %v; the first send's was %d", reopen, i, off, err, first[i])
					}
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
