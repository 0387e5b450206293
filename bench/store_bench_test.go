package bench

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/queue"
)

// Many queues in one Store. Run with -benchtime 1x:
//
//	go test -run '^$' -bench 'StoreManyQueues' -benchtime 1x -count 3 ./bench/
//
// Each run creates the queues (one 100-byte message each), waits for the
// store's checkpoint, and reports per queue: the create time (Queue +
// first Send), the resident memory and the disk beyond the messages' own
// bytes; for the whole store: descriptors, mappings and goroutines (the
// process's, less what it had before OpenStore), Close, OpenStore again
// (reopen-ms) and then opening every queue (touch-ms).
func BenchmarkStoreManyQueues(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			for range b.N {
				manyQueues(b, n)
			}
		})
	}
}

func manyQueues(b *testing.B, n int) {
	dir := freshDir(b, "store-")
	defer os.RemoveAll(dir)
	body := make([]byte, 100)
	runtime.GC()
	rss0, fd0, map0, g0 := procRSS(b), countFDs(b), countMaps(b), runtime.NumGoroutine()
	start := time.Now()
	s, err := queue.OpenStore(dir, queue.StoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		q, err := s.Queue(queueName(i))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := q.Send(body); err != nil {
			b.Fatal(err)
		}
	}
	create := time.Since(start)
	// The store's checkpoint writes every queue's head once.
	if err := s.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	rss, fds, maps, gs := procRSS(b)-rss0, countFDs(b)-fd0, countMaps(b)-map0, runtime.NumGoroutine()-g0
	disk := diskBytes(b, dir)
	start = time.Now()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	closing := time.Since(start)
	start = time.Now()
	if s, err = queue.OpenStore(dir, queue.StoreOptions{}); err != nil {
		b.Fatal(err)
	}
	reopen := time.Since(start)
	start = time.Now()
	for i := range n {
		if _, err := s.Queue(queueName(i)); err != nil {
			b.Fatal(err)
		}
	}
	touch := time.Since(start)
	if st := s.Stats(); st.Messages != uint64(n) {
		b.Fatalf("store holds %d messages after reopen, want %d", st.Messages, n)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	msgBytes := int64(n) * (100 + 16 + 16) // body, header, attributes section
	b.ReportMetric(float64(create.Microseconds())/float64(n), "create-us/queue")
	b.ReportMetric(float64(rss)/float64(n), "rss-B/queue")
	b.ReportMetric(float64(disk-msgBytes)/float64(n), "disk-B/queue")
	b.ReportMetric(float64(fds), "fds")
	b.ReportMetric(float64(maps), "mappings")
	b.ReportMetric(float64(gs), "goroutines")
	b.ReportMetric(float64(closing.Milliseconds()), "close-ms")
	b.ReportMetric(float64(reopen.Milliseconds()), "reopen-ms")
	b.ReportMetric(float64(touch.Milliseconds()), "touch-ms")
}

func queueName(i int) string { return fmt.Sprintf("tenant-%07d", i) }

// BenchmarkStoreSpreadSend: 1 KiB sends round-robin over queues=N queues
// of one store (SyncNone), ns per send. Target: the rate over 10,000
// queues at least 70% of the rate into one queue of the same store.
func BenchmarkStoreSpreadSend(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			s, qs := spreadStore(b, n, engine.SyncNone)
			defer s.Close()
			body := make([]byte, 1024)
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			stop := testkit.ThreadCPUPerOp(b)
			for i := range b.N {
				if _, err := qs[i%n].Send(body); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			stop()
		})
	}
}

// BenchmarkStoreSpreadReceiveDelete: TryReceive + Delete round-robin over
// queues=N queues that hold the messages, ns per message. Target as for
// the sends.
func BenchmarkStoreSpreadReceiveDelete(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			s, qs := spreadStore(b, n, engine.SyncNone)
			defer s.Close()
			body := make([]byte, 1024)
			b.StopTimer()
			for i := range b.N {
				if _, err := qs[i%n].Send(body); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			stop := testkit.ThreadCPUPerOp(b)
			for i := range b.N {
				q := qs[i%n]
				m, ok, err := q.TryReceive()
				if err != nil || !ok {
					b.Fatalf("TryReceive %d: %v, %v", i, ok, err)
				}
				if err := q.Delete(m.Offset); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			stop()
		})
	}
}

// BenchmarkStoreSyncedSends: SyncAlways sends of 1 KiB from goroutines=G
// goroutines, each to a queue of its own, ns per send. Target: 64
// goroutines at least 20x the rate of one (they share fsyncs).
//
// goroutines=64/queues=1 is the same 64 goroutines sending to one queue:
// the sharing of syncs a single queue gets, for comparison.
func BenchmarkStoreSyncedSends(b *testing.B) {
	for _, c := range []struct{ g, q int }{{1, 1}, {64, 64}, {64, 1}} {
		g := c.g
		b.Run(fmt.Sprintf("goroutines=%d/queues=%d", c.g, c.q), func(b *testing.B) {
			s, qs := spreadStore(b, c.q, engine.SyncAlways)
			defer s.Close()
			body := make([]byte, 1024)
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + g - 1) / g
			for k := range g {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if _, err := qs[k%len(qs)].Send(body); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(per*g)/b.Elapsed().Seconds(), "sends/s")
		})
	}
}

// spreadStore opens a store with n queues under policy sync.
func spreadStore(b *testing.B, n int, sync engine.SyncPolicy) (*queue.Store, []*queue.Queue) {
	b.Helper()
	s, err := queue.OpenStore(b.TempDir(), queue.StoreOptions{Log: engine.Options{Sync: sync}})
	if err != nil {
		b.Fatal(err)
	}
	qs := make([]*queue.Queue, n)
	for i := range qs {
		if qs[i], err = s.Queue(queueName(i)); err != nil {
			b.Fatal(err)
		}
	}
	return s, qs
}

// procRSS returns the process's resident memory in bytes.
func procRSS(b *testing.B) int64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &kb); err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func countFDs(b *testing.B) int {
	b.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Fatal(err)
	}
	return len(ents)
}

func countMaps(b *testing.B) int {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		b.Fatal(err)
	}
	return strings.Count(string(raw), "\n")
}

// diskBytes returns the bytes of disk the files under dir take.
func diskBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += testkit.DiskBytes(info)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
