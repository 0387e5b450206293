package queue

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/checkpoint"
)

// The two ways the issue allowed to move the live messages out of a held
// segment, measured side by side (bench/README.md, "Held segments"):
//
//   - copy (the queue's): the messages are appended to the end of the
//     message log with the `moved` and `receives` attributes, under the
//     queue's lock, and the next head checkpoint syncs the log before the
//     head passes the originals. A receive of a moved message is a
//     receive like any other: a zero-copy read of the mapped copy.
//   - survivors: the messages are written to a small per-queue file,
//     rewritten whole and atomically (temporary file, fsync, rename,
//     directory fsync) at each move, and again at each delete of a
//     survivor and each receive-count change (a file keyed by offsets has
//     no other way to forget one); a receive reads the body back from it.
//
// Both run with 1 KiB bodies under SyncNone, the queue's default, where a
// move's only sync is the one that protects the moved messages.

// heldQueue opens a queue with k messages of 1 KiB in flight, and returns
// their entries.
func heldQueue(b *testing.B, k int) (*Queue, []int32) {
	q, err := Open(b.TempDir(), Options{Clock: newFakeClock(), Visibility: time.Hour, CheckpointInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	body := make([]byte, 1024)
	for range k {
		if _, err := q.Send(body); err != nil {
			b.Fatal(err)
		}
		if _, ok, err := q.TryReceive(); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var live []int32
	for _, i := range q.es.byOff {
		live = append(live, i)
	}
	return q, live
}

// BenchmarkQueueMove: one move of k messages (ns/op), its latency
// quantiles, copy against survivors.
func BenchmarkQueueMove(b *testing.B) {
	for _, k := range []int{1, 64} {
		b.Run(fmt.Sprintf("copy/k=%d", k), func(b *testing.B) {
			q, live := heldQueue(b, k)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				q.mu.Lock()
				n, err := q.moveOut(live)
				q.mu.Unlock()
				if err == nil {
					err = q.syncMoved()
				}
				lat = append(lat, time.Since(start))
				if err != nil || n != k {
					b.Fatal(n, err)
				}
			}
			reportQuantiles(b, lat)
		})
		b.Run(fmt.Sprintf("survivors/k=%d", k), func(b *testing.B) {
			dir := b.TempDir()
			body := make([]byte, 1024)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if err := checkpoint.Replace(dir, "queue.survivors", encodeSurvivors(uint64(i), k, body), 0o600); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportQuantiles(b, lat)
		})
	}
}

// encodeSurvivors is the survivors file of the alternative: per message
// its offset, receive count, attributes section (here none) and body,
// each with a CRC-32C.
func encodeSurvivors(first uint64, k int, body []byte) []byte {
	var buf []byte
	for j := range k {
		var h [20]byte
		binary.BigEndian.PutUint64(h[0:], first+uint64(j))
		binary.BigEndian.PutUint32(h[8:], 3)
		binary.BigEndian.PutUint32(h[12:], uint32(len(body)))
		rec := append(h[:16], body...)
		buf = binary.BigEndian.AppendUint32(append(buf, rec...), crc32.Checksum(rec, crc32.MakeTable(crc32.Castagnoli)))
	}
	return buf
}

// BenchmarkQueueReceiveMoved: a receive (Release, then TryReceive) of a
// message in flight that was moved ("copy"), of one never moved
// ("original"), and the read a receive of a survivor adds ("survivors":
// its body read back from the file, one pread of 1 KiB, on top of the same
// hand-out).
func BenchmarkQueueReceiveMoved(b *testing.B) {
	for _, moved := range []bool{false, true} {
		name := "original"
		if moved {
			name = "copy"
		}
		b.Run(name, func(b *testing.B) {
			q, live := heldQueue(b, 1)
			if moved {
				q.mu.Lock()
				_, err := q.moveOut(live)
				q.mu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
			}
			off := q.es.e[live[0]].off
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := q.Release(off); err != nil {
					b.Fatal(err)
				}
				m, ok, err := q.TryReceive()
				lat = append(lat, time.Since(start))
				if !ok || err != nil || m.Offset != off || len(m.Body) != 1024 {
					b.Fatal(ok, err, m.Offset)
				}
			}
			reportQuantiles(b, lat)
		})
	}
	b.Run("survivors-read", func(b *testing.B) {
		dir := b.TempDir()
		if err := checkpoint.Replace(dir, "queue.survivors", encodeSurvivors(0, 64, make([]byte, 1024)), 0o600); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(filepath.Join(dir, "queue.survivors"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 1024)
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			start := time.Now()
			if _, err := f.ReadAt(buf, int64(i%64)*(16+1024+4)+16); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportQuantiles(b, lat)
	})
}

// BenchmarkQueueReceiveBesideMoves: under SyncAlways, the latency of a
// TryReceive (of messages sent before) while another goroutine moves 64
// held messages again and again, each move waiting for its copies' sync.
// A move that held the queue's lock across that sync made receivers wait
// for it.
func BenchmarkQueueReceiveBesideMoves(b *testing.B) {
	q, err := Open(b.TempDir(), Options{Log: engine.Options{Sync: engine.SyncAlways}, Clock: newFakeClock(), Visibility: time.Hour, CheckpointInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	body := make([]byte, 1024)
	held := make([][]byte, 64)
	for i := range held {
		held[i] = body
	}
	if _, err := q.SendBatch(held); err != nil {
		b.Fatal(err)
	}
	for range held {
		if _, ok, err := q.TryReceive(); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	q.mu.Lock()
	var live []int32
	for _, i := range q.es.byOff {
		live = append(live, i)
	}
	q.mu.Unlock()
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = body
	}
	for i := 0; i < b.N; i += 1000 {
		if _, err := q.SendBatch(bodies[i:min(i+1000, b.N)]); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		moves := 0
		for {
			select {
			case <-stop:
				done <- moves
				return
			default:
			}
			q.ck.mu.Lock()
			q.mu.Lock()
			_, err := q.moveOut(live)
			q.mu.Unlock()
			q.ck.mu.Unlock()
			if err != nil {
				b.Error(err)
			}
			moves++
		}
	}()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		_, ok, err := q.TryReceive()
		lat = append(lat, time.Since(start))
		if !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.StopTimer()
	close(stop)
	b.ReportMetric(float64(<-done)/float64(b.N), "moves/op")
	reportQuantiles(b, lat)
}
