package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/stopwatch"
	"github.com/pagelog/pagelog/queue"
)

// The queue's steady state: 4 GiB of 1 KiB messages through a queue whose
// log has 64 MiB segments, under SyncNone. One goroutine sends; once
// steadyDepth messages wait it also receives and deletes one message per
// send, so the head follows the end and the queue's checkpoints drop the
// segments behind it while the run goes on. Every send, and every receive
// with its delete, is timed. Run with -benchtime 1x:
//
//	go test -run '^$' -bench QueueSteady -benchtime 1x -count 3 ./bench/
//
// The rate counts the bodies sent; compare it with path=pwrite-record of
// BenchmarkAppendTail in the same run.
//
// kind=queue is a queue that owns its directory (queue.Open); kind=store
// is the one queue of a Store (queue.OpenStore, Store.Queue) with the same
// options, in the same run. Target: kind=store within 10% of kind=queue.
const (
	steadyTotal = 4 << 30
	steadyDepth = 4096
)

func BenchmarkQueueSteady(b *testing.B) {
	b.Run("kind=queue", func(b *testing.B) { queueSteady(b, openSteadyQueue) })
	b.Run("kind=store", func(b *testing.B) { queueSteady(b, openSteadyStore) })
}

// steadyOpener opens the queue of a steady run in dir; it returns the
// queue, the directory of its message log's segments, and what closes
// it.
type steadyOpener func(b *testing.B, dir string) (q *queue.Queue, segDir string, close func())

func openSteadyQueue(b *testing.B, dir string) (*queue.Queue, string, func()) {
	q, err := queue.Open(dir, queue.Options{
		Log:                engine.Options{SegmentBytes: 64 << 20},
		CheckpointInterval: 100 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	return q, dir, func() { _ = q.Close() }
}

func openSteadyStore(b *testing.B, dir string) (*queue.Queue, string, func()) {
	s, err := queue.OpenStore(dir, queue.StoreOptions{
		Log:                engine.Options{SegmentBytes: 64 << 20},
		CheckpointInterval: 100 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	q, err := s.Queue("steady")
	if err != nil {
		b.Fatal(err)
	}
	return q, filepath.Join(dir, "messages"), func() { _ = s.Close() }
}

func queueSteady(b *testing.B, open steadyOpener) {
	body := make([]byte, tailRecord)
	n := steadyTotal / tailRecord
	sends := make(latencies, 0, n*b.N)
	takes := make(latencies, 0, n*b.N)
	var wall time.Duration
	var vm vmDelta
	defer vm.report(b)
	var maxSegs int
	var recycled, rolled uint64 // segments made from dropped files, and about how many were made
	for range b.N {
		b.StopTimer()
		dir := freshDir(b, "steady-")
		q, segDir, closeQueue := open(b, dir)
		before := readVMStat()
		b.StartTimer()
		start := time.Now()
		for i := 0; i < n; i++ {
			t := stopwatch.Start()
			if _, err := q.Send(body); err != nil {
				b.Fatal(err)
			}
			sends = append(sends, t.Elapsed())
			if i < steadyDepth {
				continue
			}
			t = stopwatch.Start()
			m, ok, err := q.TryReceive()
			if err != nil || !ok {
				b.Fatalf("receive at send %d: ok %v, %v", i, ok, err)
			}
			if err := q.Delete(m.Offset); err != nil {
				b.Fatal(err)
			}
			takes = append(takes, t.Elapsed())
			if i%(1<<16) == 0 {
				maxSegs = max(maxSegs, countSegments(b, segDir))
			}
		}
		wall += time.Since(start)
		b.StopTimer()
		st := q.Stats().Log
		recycled += st.Recycled
		rolled += uint64(steadyTotal / (64 << 20))
		vm.add(before, readVMStat())
		closeQueue()
		_ = os.RemoveAll(dir)
		b.StartTimer()
	}
	b.SetBytes(int64(n) * tailRecord)
	tailStats(b, sends, int64(n)*tailRecord*int64(b.N), wall)
	takes.reportAs(b, "take-")
	b.ReportMetric(float64(maxSegs), "max-segments")
	b.ReportMetric(float64(recycled)/float64(rolled), "recycled-fraction")
}

// countSegments counts the message log's segment files in dir.
func countSegments(b *testing.B, dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			n++
		}
	}
	return n
}
