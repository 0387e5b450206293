package queue

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// BenchmarkQueueCycle: one goroutine, 1 KiB bodies, SyncNone, one
// Send+Receive+Delete per op. Each cycle is timed on its own: p50-ns and
// p99-ns are its quantiles. Target: p50 <= 1.5 µs.
func BenchmarkQueueCycle(b *testing.B) {
	q, err := Open(b.TempDir(), Options{Log: engine.Options{Sync: engine.SyncNone}})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	cycle(b, q, make([]byte, 1024))
}

// reportQuantiles reports the p50, p99, p99.9, p99.99 and max of lat.
func reportQuantiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
	b.ReportMetric(q(0.999), "p99.9-ns")
	b.ReportMetric(q(0.9999), "p99.99-ns")
	b.ReportMetric(float64(lat[len(lat)-1]), "max-ns")
}

// BenchmarkQueueInFlightMemory: the heap a queue holds for 1,000,000
// messages in flight, per message. Target: <= 48 bytes.
func BenchmarkQueueInFlightMemory(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		b.StopTimer()
		q, err := Open(b.TempDir(), Options{Clock: newFakeClock()})
		if err != nil {
			b.Fatal(err)
		}
		body := make([]byte, 16)
		for range n {
			if _, err := q.Send(body); err != nil {
				b.Fatal(err)
			}
		}
		before := heapInUse()
		b.StartTimer()
		for range n {
			if _, err := q.Receive(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		after := heapInUse()
		if st := q.Stats(); st.InFlight != n {
			b.Fatalf("%d in flight", st.InFlight)
		}
		b.ReportMetric(float64(after-before)/n, "bytes/msg")
		runtime.KeepAlive(q)
		q.Close()
	}
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkQueueExpire100k: 100,000 deadlines expire at once; the time is
// that of the timer's call (expire and wake). Target: < 50 ms.
func BenchmarkQueueExpire100k(b *testing.B) {
	const n = 100_000
	for range b.N {
		b.StopTimer()
		clock := newFakeClock()
		q, err := Open(b.TempDir(), Options{Clock: clock, Visibility: time.Minute, CheckpointInterval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		for range n {
			if _, err := q.Send(nil); err != nil {
				b.Fatal(err)
			}
			if _, err := q.Receive(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t0 := time.Now()
		clock.Advance(time.Minute) // the deadline timer fires and expires them all
		took := time.Since(t0)
		b.StopTimer()
		if st := q.Stats(); st.ReadyAgain != n || st.InFlight != 0 {
			b.Fatalf("after the expiry: %+v", st)
		}
		b.ReportMetric(float64(took.Microseconds())/1000, "ms/expiry")
		q.Close()
	}
}

// BenchmarkQueueOpenBacklog: Open (and Close) of a queue holding 256 MiB
// of 1 KiB messages sent just now, none received: the open walks the
// backlog for dedup ids within the window and for moved copies.
func BenchmarkQueueOpenBacklog(b *testing.B) {
	dir := b.TempDir()
	q, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	for range 256 << 10 {
		if _, err := q.Send(body); err != nil {
			b.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		q, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := q.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkQueueOpenBacklogMoves: Open (and Close) of a queue holding
// 500,000 messages of 100 bytes, none received, behind a message that was
// moved out of a held segment ("moves=yes") or with no move ever
// ("moves=no"), older than the dedup window. Open finds the copies through
// queue.head's index (it read the whole backlog for them before). cpu-ms/op
// is the process's CPU time per open.
func BenchmarkQueueOpenBacklogMoves(b *testing.B) {
	for _, moved := range []bool{false, true} {
		b.Run(fmt.Sprintf("moves=%s", map[bool]string{false: "no", true: "yes"}[moved]), func(b *testing.B) {
			dir := b.TempDir()
			clock := newFakeClock()
			// A dedup window of a millisecond: the backlog is older than it
			// at each open, which then reads no record for dedup ids.
			o := Options{Log: engine.Options{SegmentBytes: 1 << 20}, Clock: clock, Visibility: time.Hour, CheckpointInterval: time.Second, DedupWindow: time.Millisecond}
			q, err := Open(dir, o)
			if err != nil {
				b.Fatal(err)
			}
			body := make([]byte, 100)
			if moved {
				if _, err := q.Send([]byte("stuck")); err != nil {
					b.Fatal(err)
				}
				if _, ok, err := q.TryReceive(); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
			for range 60_000 { // 8 MiB through 1 MiB segments
				if _, err := q.Send(body); err != nil {
					b.Fatal(err)
				}
				m, ok, err := q.TryReceive()
				if !ok || err != nil {
					b.Fatal(ok, err)
				}
				if err := q.Delete(m.Offset); err != nil {
					b.Fatal(err)
				}
			}
			clock.Advance(time.Second) // a checkpoint, and a move
			if st := q.Stats(); (st.Moved > 0) != moved {
				b.Fatalf("moved %d messages, want moves %v", st.Moved, moved)
			}
			bodies := make([][]byte, 1000)
			for i := range bodies {
				bodies[i] = body
			}
			for range 500 {
				if _, err := q.SendBatch(bodies); err != nil {
					b.Fatal(err)
				}
			}
			if err := q.Close(); err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration // user and system time of the opens: less noisy than wall time on a busy machine
			b.ResetTimer()
			for range b.N {
				c0 := cpuTime()
				q, err := Open(dir, o)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += cpuTime() - c0
				want := uint64(500_000)
				if moved {
					want++
				}
				if st := q.Stats(); st.Messages != want {
					b.Fatalf("after open: %+v", st)
				}
				if err := q.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}
