package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// TestReleaseSparesFullDiskChurn: a log on a small tmpfs that
// fills up again and again. The writer appends in batches until the disk
// is full (appends then release the spare files themselves), and drops
// the older half of its segments whenever an append fails; a second
// goroutine calls ReleaseSpares as a queue's head checkpoint does;
// readers hold records of the segments being dropped and reused, and
// check their bytes before letting them go. An append either works
// whole or fails with ENOSPC having written nothing of its batch's
// failed part; nothing reads damaged or wrong; Close leaves no spare
// file, descriptor or mapping; the log reopens whole.
func TestReleaseSparesFullDiskChurn(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"none-recycle1", Options{SegmentBytes: 256 << 10, RecycleSegments: 1}},
		{"interval-recycle3", Options{SegmentBytes: 128 << 10, RecycleSegments: 3, Sync: SyncInterval, SyncInterval: time.Millisecond}},
		{"always", Options{SegmentBytes: 128 << 10, Sync: SyncAlways}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsdir := mountTmpfs(t, "6m")
			dir := filepath.Join(fsdir, "log")
			c.opts.MaxRecordBytes = 16 << 10
			l := mustOpen(t, dir, c.opts)
			var (
				fulls    atomic.Int64
				released atomic.Int64
			)
			body, valid := paddedGenerationBody(1500)
			h := startChurn(l, churnConfig{
				seed:  9,
				body:  body,
				check: valid,
				batch: 8,
				// An append that fails on the full disk drops the older
				// half of the segments.
				appendFailed: func(h *churn, err error) error {
					if !errors.Is(err, syscall.ENOSPC) {
						return fmt.Errorf("AppendBatch: %w", err)
					}
					fulls.Add(1)
					segs := *l.segs.Load()
					if len(segs) < 3 {
						time.Sleep(time.Millisecond) // readers hold the space
						return nil
					}
					if _, err := l.DropBefore(segs[len(segs)/2].Base()); err != nil {
						return fmt.Errorf("DropBefore: %w", err)
					}
					return nil
				},
				readers: churnReaders{n: 2, span: 50, hold: 2, releaseOneIn: 2, pause: 500 * time.Microsecond, oldestFirst: true},
				extra: []func(h *churn, rng *rand.Rand){
					func(h *churn, _ *rand.Rand) { // the checkpoint's release
						for !h.stopped() {
							released.Add(int64(l.ReleaseSpares()))
							time.Sleep(200 * time.Microsecond)
						}
					},
				},
			})
			h.waitUntil(time.Second, 10*time.Second, func() bool { return fulls.Load() >= 100 })
			if err := h.end(); err != nil {
				t.Fatal(err)
			}
			st := l.Stats()
			t.Logf("%d records, %d full-disk failures, %d spare files released, %d reads, %d segments made from kept files",
				l.Next(), fulls.Load(), released.Load(), h.reads.Load(), st.Recycled)
			if fulls.Load() == 0 {
				t.Fatal("the disk never filled")
			}
			first, next := l.First(), l.Next()
			// Close may find the disk full for log.clean: room for it.
			ballast := filepath.Join(fsdir, "spare")
			_ = os.Remove(ballast)
			if err := l.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Close: %v", err)
			}
			if left := sparesIn(t, dir); len(left) != 0 {
				t.Errorf("spare files after Close: %v", left)
			}
			if n := openFDs(t, dir); n != 0 {
				t.Errorf("after Close: %d descriptors open on the log's files:\n%s", n, testkit.DescriptorsUnder(t, dir))
			}
			// The segments' .log files (the index mappings of segments
			// whose creation failed on the full disk are
			// TestRollFailedCreateUnmapsOffsetIndex's).
			if n := mappedLogFiles(t, dir); n != 0 {
				t.Errorf("after Close: %d .log files of the log mapped:\n%s", n, testkit.MapsUnder(t, dir))
			}
			r := reopenChurned(t, dir, c.opts, first, next, valid)
			if rep, err := r.Verify(nil); err != nil || !rep.Healthy() {
				t.Errorf("reopened: Verify: %v %+v", err, rep)
			}
		})
	}
}
