package inflight

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkCycle measures the steady state: one Add at the cursor and one
// Done of the oldest message per op, with a window of messages in flight.
func BenchmarkCycle(b *testing.B) {
	for _, window := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			tb := New(0)
			for off := range uint64(window) {
				tb.Add(off, int64(off))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				off := tb.Cursor()
				tb.Add(off, int64(off))
				tb.Done(off - uint64(window))
			}
		})
	}
}

// BenchmarkRedeliver measures Expire + PopReady + Done with random deadlines.
func BenchmarkRedeliver(b *testing.B) {
	const window = 100000
	r := rand.New(rand.NewPCG(1, 1))
	tb := New(0)
	for off := range uint64(window) {
		tb.Add(off, r.Int64N(window))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range int64(b.N) {
		tb.Expire(i)
		if off, _, ok := tb.PopReady(i + r.Int64N(window)); ok && r.IntN(2) == 0 {
			tb.Done(off)
			tb.Add(tb.Cursor(), i+r.Int64N(window))
		}
	}
}

// BenchmarkMemory reports the heap bytes per in-flight message.
func BenchmarkMemory(b *testing.B) {
	for _, n := range []int{1000000} {
		b.Run(fmt.Sprintf("inflight=%d", n), func(b *testing.B) {
			var perEntry float64
			for range b.N {
				before := heapAlloc()
				tb := New(0)
				for off := range uint64(n) {
					tb.Add(off, int64(off)*7%1000)
				}
				perEntry = float64(heapAlloc()-before) / float64(n)
				runtime.KeepAlive(tb)
			}
			b.ReportMetric(perEntry, "bytes/entry")
		})
	}
}

// BenchmarkExpire measures one Expire call that moves n messages with
// random deadlines from in flight to ready again; ns/op is that call. In
// the steady case the table is reused, so its arrays have reached their
// size, as in a running engine; in the cold case the table is new and the
// ready-again array grows during the call.
func BenchmarkExpire(b *testing.B) {
	for _, n := range []int{100000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(2, 2))
			tb := New(0)
			for off := range uint64(n) {
				tb.Add(off, r.Int64N(1e9))
			}
			expireAll(b, tb, n) // grow the ready-again array once
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for range n {
					tb.PopReady(r.Int64N(1e9))
				}
				b.StartTimer()
				expireAll(b, tb, n)
			}
		})
		b.Run(fmt.Sprintf("n=%d/cold", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(2, 2))
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				tb := New(0)
				for off := range uint64(n) {
					tb.Add(off, r.Int64N(1e9))
				}
				b.StartTimer()
				expireAll(b, tb, n)
			}
		})
	}
}

func expireAll(b *testing.B, tb *Table, n int) {
	if got := tb.Expire(1e9); got != n {
		b.Fatalf("expired %d, want %d", got, n)
	}
}
