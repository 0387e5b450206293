package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
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
				stop     atomic.Bool
				wg       sync.WaitGroup
				failure  firstError
				fulls    atomic.Int64
				released atomic.Int64
				reads    atomic.Int64
			)
			fail := func(err error) { failure.set(err); stop.Store(true) }
			body := func(off uint64) []byte {
				b := generationBody(off, 0)
				return append(b, make([]byte, 1500)...)
			}
			valid := func(r Record, off uint64) error {
				if len(r.Body) < 1500 {
					return fmt.Errorf("record at %d: %d bytes", off, len(r.Body))
				}
				r.Body = r.Body[:len(r.Body)-1500]
				return checkGenerationBody(r, off)
			}
			wg.Add(1)
			go func() { // the writer
				defer wg.Done()
				rng := rand.New(rand.NewPCG(1, 9))
				for !stop.Load() {
					off := l.Next()
					bodies := make([][]byte, 1+rng.IntN(8))
					for i := range bodies {
						bodies[i] = body(off + uint64(i))
					}
					got, n, err := l.AppendBatch(bodies, nil)
					if n > 0 && got != off {
						fail(fmt.Errorf("AppendBatch: %d records at %d, want them at %d", n, got, off))
						return
					}
					if l.Next() != off+uint64(n) {
						fail(fmt.Errorf("AppendBatch: %d records written, next %d, want %d", n, l.Next(), off+uint64(n)))
						return
					}
					if err == nil {
						continue
					}
					if !errors.Is(err, syscall.ENOSPC) {
						fail(fmt.Errorf("AppendBatch at %d: %w", off, err))
						return
					}
					fulls.Add(1)
					segs := *l.segs.Load()
					if len(segs) < 3 {
						time.Sleep(time.Millisecond) // readers hold the space
						continue
					}
					if _, err := l.DropBefore(segs[len(segs)/2].Base()); err != nil {
						fail(fmt.Errorf("DropBefore: %w", err))
						return
					}
				}
			}()
			wg.Add(1)
			go func() { // the checkpoint's release
				defer wg.Done()
				for !stop.Load() {
					released.Add(int64(l.ReleaseSpares()))
					time.Sleep(200 * time.Microsecond)
				}
			}()
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(10+i), 9))
					var kept []Record
					defer func() {
						for _, r := range kept {
							r.Release()
						}
					}()
					for !stop.Load() {
						first, next := l.First(), l.Next()
						if next <= first {
							continue
						}
						off := first + rng.Uint64N(min(next-first, 50))
						r, err := l.Read(off)
						if err != nil {
							if !dropReadErrOK(err) {
								fail(fmt.Errorf("Read(%d): %w", off, err))
								return
							}
							continue
						}
						reads.Add(1)
						if err := valid(r, off); err != nil {
							r.Release()
							fail(err)
							return
						}
						kept = append(kept, r)
						if len(kept) > 2 || rng.IntN(2) == 0 {
							time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
							if err := valid(kept[0], kept[0].Offset); err != nil {
								fail(fmt.Errorf("a held record changed: %w", err))
								return
							}
							kept[0].Release()
							kept = kept[1:]
						}
					}
				}()
			}
			start := time.Now()
			for !stop.Load() && time.Since(start) < 10*time.Second && (fulls.Load() < 100 || time.Since(start) < time.Second) {
				time.Sleep(10 * time.Millisecond)
			}
			stop.Store(true)
			wg.Wait()
			if err := failure.get(); err != nil {
				t.Fatal(err)
			}
			st := l.Stats()
			t.Logf("%d records, %d full-disk failures, %d spare files released, %d reads, %d segments made from kept files",
				l.Next(), fulls.Load(), released.Load(), reads.Load(), st.Recycled)
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
			r := mustOpen(t, dir, c.opts)
			defer r.Close()
			if r.First() != first || r.Next() != next {
				t.Fatalf("reopened: [%d, %d), want [%d, %d)", r.First(), r.Next(), first, next)
			}
			want := first
			for rec, err := range r.Records(first) {
				if err != nil {
					t.Fatalf("reopened: Records at %d: %v", want, err)
				}
				if rec.Offset != want {
					t.Fatalf("reopened: Records gave %d, want %d", rec.Offset, want)
				}
				if err := valid(rec, want); err != nil {
					t.Fatalf("reopened: %v", err)
				}
				want++
			}
			if want != next {
				t.Fatalf("reopened: Records ended at %d, want %d", want, next)
			}
			if rep, err := r.Verify(nil); err != nil || !rep.Healthy() {
				t.Errorf("reopened: Verify: %v %+v", err, rep)
			}
		})
	}
}
