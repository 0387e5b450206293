package queue

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// BenchmarkQueueSendBatch: SendBatch of 100 bodies of 1 KiB under
// SyncAlways; ns/op is one batch. syncs/op counts the sync rounds of the
// queue's logs (Log.Stats), fsyncs/op the fsync and fdatasync system calls
// a batch costs, with strace (when it is on PATH) around a child process
// that sends N batches, less one that sends none. Target: 1.
func BenchmarkQueueSendBatch(b *testing.B) {
	q, err := Open(b.TempDir(), Options{Log: engine.Options{Sync: engine.SyncAlways}, CheckpointInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	bodies := make([][]byte, 100)
	for i := range bodies {
		bodies[i] = make([]byte, 1024)
	}
	lat := make([]time.Duration, 0, b.N)
	rounds := func() uint64 { return q.log.Stats().Syncs + q.dels.Stats().Syncs }
	before := rounds()
	b.SetBytes(100 * 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := q.SendBatch(bodies); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportQuantiles(b, lat)
	b.ReportMetric(float64(rounds()-before)/float64(b.N), "syncs/op")
	if s, ok := syncsPerBatch(b, 50); ok {
		b.ReportMetric(s, "fsyncs/op")
	}
}

// syncsPerBatch counts, with strace, the syncs of n SendBatch calls in a
// child process, less those of a child that sends none, per batch.
func syncsPerBatch(b *testing.B, n int) (float64, bool) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		b.Log("strace is not on PATH: syncs/op not measured")
		return 0, false
	}
	count := func(batches int) (int, bool) {
		dir := b.TempDir()
		out := filepath.Join(dir, "strace.txt")
		cmd := exec.Command(strace, "-f", "-qq", "-c", "-e", "trace=fsync,fdatasync,sync_file_range,msync", "-o", out,
			os.Args[0], "-test.run=^TestQueueSyncCountChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("PAGELOG_QUEUE_SYNC_CHILD=%s:%d", filepath.Join(dir, "q"), batches))
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Logf("strace: %v\n%s", err, msg)
			return 0, false
		}
		f, err := os.Open(out)
		if err != nil {
			b.Log(err)
			return 0, false
		}
		defer f.Close()
		calls := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) >= 5 && (fs[len(fs)-1] == "fsync" || fs[len(fs)-1] == "fdatasync" || fs[len(fs)-1] == "sync_file_range" || fs[len(fs)-1] == "msync") {
				if c, err := strconv.Atoi(fs[3]); err == nil {
					calls += c
				}
			}
		}
		return calls, true
	}
	base, ok1 := count(0)
	with, ok2 := count(n)
	if !ok1 || !ok2 {
		return 0, false
	}
	return float64(with-base) / float64(n), true
}

// TestQueueSyncCountChild is the child of syncsPerBatch: it sends the
// batches it is told to and does nothing otherwise.
func TestQueueSyncCountChild(t *testing.T) {
	env := os.Getenv("PAGELOG_QUEUE_SYNC_CHILD")
	if env == "" {
		t.Skip("the child of BenchmarkQueueSendBatch's sync count")
	}
	i := strings.LastIndexByte(env, ':')
	dir, arg := env[:i], env[i+1:]
	n, _ := strconv.Atoi(arg)
	q, err := Open(dir, Options{Log: engine.Options{Sync: engine.SyncAlways}, CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	bodies := make([][]byte, 100)
	for i := range bodies {
		bodies[i] = make([]byte, 1024)
	}
	for range n {
		if _, err := q.SendBatch(bodies); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkQueueDelayedBacklog: one goroutine, 1 KiB bodies, SyncNone,
// Send+Receive+Delete of ready messages per op, beside pending=N messages
// delayed by an hour that the queue has already looked at (they sit in
// its time heap). Target: pending=100000 within 1.5x of pending=0.
func BenchmarkQueueDelayedBacklog(b *testing.B) {
	for _, pending := range []int{0, 100_000} {
		b.Run(fmt.Sprint("pending=", pending), func(b *testing.B) {
			q, err := Open(b.TempDir(), Options{Log: engine.Options{Sync: engine.SyncNone}})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			body := make([]byte, 1024)
			for range pending {
				if _, err := q.SendWith(body, SendOptions{Delay: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			if _, ok, err := q.TryReceive(); ok || err != nil { // the cursor passes them all
				b.Fatalf("a delayed message was handed out: %v", err)
			}
			if st := q.Stats(); st.Delayed != pending {
				b.Fatalf("%d delayed, want %d", st.Delayed, pending)
			}
			cycle(b, q, body)
		})
	}
}

// cycle runs b.N Send+Receive+Delete cycles of body on q, each timed.
func cycle(b *testing.B, q *Queue, body []byte) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	stop := testkit.ThreadCPUPerOp(b)
	for range b.N {
		t0 := time.Now()
		if _, err := q.Send(body); err != nil {
			b.Fatal(err)
		}
		m, err := q.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Delete(m.Offset); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	stop()
	reportQuantiles(b, lat)
}

// BenchmarkQueueReceiveCount: what the durable receive count costs: the
// Send+Receive+Delete cycle with MaxReceives 0 (no receive-count record)
// and 3 (one record per hand-out, synced before the hand-out under
// SyncAlways), under SyncNone and SyncAlways.
func BenchmarkQueueReceiveCount(b *testing.B) {
	for _, policy := range []engine.SyncPolicy{engine.SyncNone, engine.SyncAlways} {
		for _, maxRecv := range []int{0, 3} {
			b.Run(fmt.Sprintf("sync=%v/maxreceives=%d", policy, maxRecv), func(b *testing.B) {
				q, err := Open(b.TempDir(), Options{Log: engine.Options{Sync: policy}, MaxReceives: maxRecv})
				if err != nil {
					b.Fatal(err)
				}
				defer q.Close()
				cycle(b, q, make([]byte, 1024))
			})
		}
	}
}

// BenchmarkQueueGroupsDrain: 10,000 ordering groups of 10 messages each
// (sent round-robin), drained by 4 receivers that each receive, check the
// message is the next of its group, and delete it. ns/op is one whole
// drain of 100,000 messages; msgs/s the rate. The order is checked: a
// message out of its group's order fails the benchmark.
func BenchmarkQueueGroupsDrain(b *testing.B) {
	const groups, per, receivers = 10_000, 10, 4
	names := make([]string, groups)
	for g := range names {
		names[g] = fmt.Sprint("g", g)
	}
	var total time.Duration
	for range b.N {
		b.StopTimer()
		q, err := Open(b.TempDir(), Options{Log: engine.Options{Sync: engine.SyncNone}})
		if err != nil {
			b.Fatal(err)
		}
		for k := range per {
			for g := range groups {
				if _, err := q.SendWith([]byte(fmt.Sprintf("%d %d", g, k)), SendOptions{Group: names[g]}); err != nil {
					b.Fatal(err)
				}
			}
		}
		next := make([]atomic.Int32, groups)
		var left atomic.Int64
		left.Store(groups * per)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var bad atomic.Value
		b.StartTimer()
		t0 := time.Now()
		for range receivers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					m, err := q.Receive(ctx)
					if err != nil {
						return
					}
					var g, k int
					fmt.Sscan(string(m.Body), &g, &k)
					if !next[g].CompareAndSwap(int32(k), int32(k+1)) {
						bad.Store(fmt.Sprintf("group %d: message %d handed out, expected %d", g, k, next[g].Load()))
					}
					if err := q.Delete(m.Offset); err != nil {
						bad.Store(err.Error())
					}
					if left.Add(-1) == 0 {
						cancel()
					}
				}
			}()
		}
		wg.Wait()
		total += time.Since(t0)
		b.StopTimer()
		cancel()
		if v := bad.Load(); v != nil {
			b.Fatal(v)
		}
		q.Close()
	}
	b.ReportMetric(float64(groups*per*b.N)/total.Seconds(), "msgs/s")
}

// BenchmarkQueueDelayLateness: with the system clock, a receiver blocked
// in Receive and a message sent with a 5 ms delay: how long after its due
// time it is handed out (path=queue). path=timer is the machine's own
// floor: a bare time.AfterFunc of 5 ms waking a goroutine blocked on a
// channel, measured the same way. Target: within 10 ms.
func BenchmarkQueueDelayLateness(b *testing.B) {
	b.Run("path=queue", func(b *testing.B) {
		q, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		ctx := context.Background()
		late := make([]time.Duration, 0, b.N)
		for range b.N {
			got := make(chan time.Time, 1)
			go func() {
				m, err := q.Receive(ctx)
				if err != nil {
					b.Error(err)
				}
				got <- time.Now()
				q.Delete(m.Offset)
			}()
			for blockedReceivers(q) == 0 {
				time.Sleep(10 * time.Microsecond)
			}
			off, err := q.SendWith([]byte("d"), SendOptions{Delay: 5 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			_, a := recAttrs(b, q, off)
			at := <-got
			due := time.UnixMilli(a.Due)
			if at.Before(due) {
				b.Fatalf("handed out %v before its due time", due.Sub(at))
			}
			late = append(late, at.Sub(due))
		}
		reportQuantiles(b, late)
	})
	b.Run("path=timer", func(b *testing.B) {
		late := make([]time.Duration, 0, b.N)
		for range b.N {
			wake := make(chan struct{})
			got := make(chan time.Time, 1)
			go func() {
				<-wake
				got <- time.Now()
			}()
			due := time.Now().Add(5 * time.Millisecond)
			time.AfterFunc(5*time.Millisecond, func() { close(wake) })
			late = append(late, (<-got).Sub(due))
		}
		reportQuantiles(b, late)
	})
}
