package peers

// BenchmarkReplicatedSend: a send to a three-node replicated queue
// (raftstore/rqueue: raft v1.8.0 on raftstore, every node in this process
// with its own directory and its fsyncs) beside a send to one pagelog
// queue under SyncAlways, 1 KiB messages:
//
//	system=queue                   queue.Send, SyncAlways
//	system=raft3/transport=inmem   Node.Send on the leader, raft.InmemTransport
//	system=raft3/transport=tcp     the same over raft.NewTCPTransport on 127.0.0.1
//
// senders=1 sends one message at a time; senders=16 from 16 goroutines
// (raft batches their entries into one StoreLogs; the queue shares its
// fdatasyncs). A raft send returns once a majority has the entry on disk
// and the leader has applied it: its latency is the commit latency. ns/op
// is per message; msgs/s; p50 to max of each send.
//
//	cd bench/peers && go test -run '^$' -bench ReplicatedSend -benchtime 2000x -count 5 .

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
	"github.com/pagelog/pagelog/raftstore/rqueue"
)

func BenchmarkReplicatedSend(b *testing.B) {
	for _, senders := range []int{1, 16} {
		b.Run(fmt.Sprintf("system=queue/senders=%d", senders), func(b *testing.B) {
			q, err := queue.Open(benchDir(b, "queue"), queue.Options{Log: engine.Options{Sync: engine.SyncAlways}})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			runSends(b, senders, func(body []byte) error { _, err := q.Send(body); return err })
		})
		for _, transport := range []string{"inmem", "tcp"} {
			b.Run(fmt.Sprintf("system=raft3/transport=%s/senders=%d", transport, senders), func(b *testing.B) {
				leader := startCluster(b, transport)
				ctx := context.Background()
				runSends(b, senders, func(body []byte) error {
					_, err := leader.Send(ctx, []rqueue.Outgoing{{Body: body}})
					return err
				})
				// Every node holds every message once the followers applied.
				if st := leader.Status(); st.NextID != uint64(b.N)+1 {
					b.Fatalf("leader's next id %d after %d sends", st.NextID, b.N)
				}
			})
		}
	}
}

func benchDir(b *testing.B, name string) string {
	b.Helper()
	dir, err := os.MkdirTemp(os.Getenv("LOGSTORE_DIR"), name+"-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// runSends runs b.N sends of 1 KiB from senders goroutines, timing each.
func runSends(b *testing.B, senders int, send func([]byte) error) {
	body := entryBody(7)
	lats := make([]latencies, senders)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.SetBytes(entryBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				start := time.Now()
				if err := send(body); err != nil {
					failed.Store(err)
					return
				}
				lats[g] = append(lats[g], time.Since(start))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	var all latencies
	for _, l := range lats {
		all = append(all, l...)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	all.report(b)
}

// startCluster starts three nodes in this process and returns the leader
// once it serves.
func startCluster(b *testing.B, transport string) *rqueue.Node {
	b.Helper()
	dir := benchDir(b, "raft3")
	trans := make([]raft.Transport, 3)
	var peers []raft.Server
	for i := range trans {
		switch transport {
		case "inmem":
			_, t := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("n%d", i)))
			trans[i] = t
		case "tcp":
			t, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			trans[i] = t
			b.Cleanup(func() { t.Close() })
		}
		peers = append(peers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: trans[i].LocalAddr()})
	}
	if transport == "inmem" {
		for i, t := range trans {
			for j, o := range trans {
				if i != j {
					t.(*raft.InmemTransport).Connect(o.LocalAddr(), o)
				}
			}
		}
	}
	nodes := make([]*rqueue.Node, 3)
	for i := range nodes {
		n, err := rqueue.Start(rqueue.Config{
			ID: string(peers[i].ID), Dir: filepath.Join(dir, string(peers[i].ID)), Transport: trans[i],
			Peers: peers, Bootstrap: true, LogOutput: io.Discard,
			Raft: func(c *raft.Config) {
				c.HeartbeatTimeout = 500 * time.Millisecond
				c.ElectionTimeout = 500 * time.Millisecond
				c.LeaderLeaseTimeout = 250 * time.Millisecond
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = n
		b.Cleanup(func() { n.Close() })
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.Status().Ready {
				return n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatal("no leader within 20 s")
	return nil
}
