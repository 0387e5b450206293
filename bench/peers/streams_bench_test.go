package peers

// Streams beside the peers that have the feature (issue: streams), in one
// run, 1 KiB records:
//
//	BenchmarkStreamVisibility   append-to-read latency of a live reader
//	BenchmarkStreamCommit       what a durable consumer's commit costs
//
//	cd bench/peers && go test -run '^$' -bench 'StreamVisibility|StreamCommit/system=/sync=(none|default)' -benchtime 20000x -count 5 .
//	cd bench/peers && go test -run '^$' -bench 'StreamCommit/system=/sync=always' -benchtime 2000x -count 5 .
//
// Each reports p50, p99, p99.9, p99.99 and max of the timed operations
// (b.ReportMetric); ns/op is the whole loop (appends, pacing, reads).

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	diskqueue "github.com/nsqio/go-diskqueue"
	"github.com/pagelog/pagelog/bench/peers/internal/embnats"
	"github.com/pagelog/pagelog/engine"
)

const (
	streamRecord = 1024
	// streamGap is how long the writer waits after the reader took the
	// record before it appends the next (a busy wait): each figure is one
	// record's latency, not that of a queue behind a reader the scheduler
	// put aside, and a reader that blocks has gone to sleep by then.
	streamGap = 20 * time.Microsecond
)

// A record carries the wall clock read just before the append (bytes 0-8)
// and its number (bytes 8-16); the reader subtracts the clock from its own
// once it holds the record, Append's (Publish's, Put's) own cost included.
func stamp(body []byte, i uint64) {
	binary.LittleEndian.PutUint64(body[8:], i)
	binary.LittleEndian.PutUint64(body, uint64(time.Now().UnixNano()))
}

func since(body []byte) time.Duration {
	return time.Duration(time.Now().UnixNano() - int64(binary.LittleEndian.Uint64(body)))
}

// checkRecord reports a record that is not the i-th appended.
func checkRecord(body []byte, i uint64) error {
	if len(body) != streamRecord {
		return fmt.Errorf("record %d: %d bytes, want %d", i, len(body), streamRecord)
	}
	if got := binary.LittleEndian.Uint64(body[8:]); got != i {
		return fmt.Errorf("record %d: read record %d", i, got)
	}
	return nil
}

// streamPeer is one system's live stream: append is called by the writer
// goroutine, next (blocking for the next record; release frees it) by the
// reader goroutine.
type streamPeer struct {
	append func(body []byte) error
	next   func() (body []byte, release func(), err error)
	close  func() error
}

var streamPeers = []struct {
	name string
	doc  string
	open func(dir string) (*streamPeer, error)
}{
	{"pagelog-wait", "Log.Wait then Read in a goroutine of the writer's process (WaitSpin 0: it sleeps on a channel)", func(dir string) (*streamPeer, error) {
		return openPagelogFollower(dir, 0)
	}},
	{"pagelog-wait-spin", "the same with WaitSpin -1 (it never sleeps: a core)", func(dir string) (*streamPeer, error) {
		return openPagelogFollower(dir, -1)
	}},
	{"pagelog-cursor", "a Cursor (a read-only log that follows the writer through log.notify) and Next, in the writer's process", openPagelogCursor},
	{"jetstream", "embedded nats-server, file-store stream, js.Publish (waits for the PubAck); a durable pull consumer (AckNone) read with Consumer.Messages", openJetStreamStream},
	{"go-diskqueue", "Put (returns once written); a receive from ReadChan", openDiskqueueStream},
}

func openPagelogFollower(dir string, spin time.Duration) (*streamPeer, error) {
	l, err := engine.Open(dir, engine.Options{WaitSpin: spin})
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	off := uint64(0)
	return &streamPeer{
		append: func(body []byte) error { _, err := l.Append(body); return err },
		next: func() ([]byte, func(), error) {
			if err := l.Wait(ctx, off); err != nil {
				return nil, nil, err
			}
			r, err := l.Read(off)
			if err != nil {
				return nil, nil, err
			}
			off++
			return r.Body, r.Release, nil
		},
		close: l.Close,
	}, nil
}

func openPagelogCursor(dir string) (*streamPeer, error) {
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		return nil, err
	}
	c, err := engine.OpenCursor(dir, "bench", engine.CursorOptions{})
	if err != nil {
		l.Close()
		return nil, err
	}
	ctx := context.Background()
	return &streamPeer{
		append: func(body []byte) error { _, err := l.Append(body); return err },
		next: func() ([]byte, func(), error) {
			r, err := c.Next(ctx)
			if err != nil {
				return nil, nil, err
			}
			return r.Body, r.Release, nil
		},
		close: func() error {
			err := c.Close()
			if cerr := l.Close(); err == nil {
				err = cerr
			}
			return err
		},
	}, nil
}

// openJetStream starts an embedded server with a file-store stream
// "BENCH" on subject "bench" and a durable pull consumer "reader".
func openJetStream(dir string, syncAlways bool, ack jetstream.AckPolicy) (*embnats.Instance, jetstream.Consumer, error) {
	inst, err := embnats.Start(dir, syncAlways)
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	stream, err := inst.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "BENCH",
		Subjects:  []string{"bench"},
		Storage:   jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy,
		Replicas:  1,
	})
	if err == nil {
		var cons jetstream.Consumer
		cons, err = stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:   "reader",
			AckPolicy: ack,
			AckWait:   time.Minute,
		})
		if err == nil {
			return inst, cons, nil
		}
	}
	inst.Close()
	return nil, nil, err
}

func openJetStreamStream(dir string) (*streamPeer, error) {
	inst, cons, err := openJetStream(dir, false, jetstream.AckNonePolicy)
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages()
	if err != nil {
		inst.Close()
		return nil, err
	}
	ctx := context.Background()
	return &streamPeer{
		append: func(body []byte) error { _, err := inst.JS.Publish(ctx, "bench", body); return err },
		next: func() ([]byte, func(), error) {
			m, err := it.Next()
			if err != nil {
				return nil, nil, err
			}
			return m.Data(), func() {}, nil
		},
		close: func() error {
			it.Stop()
			return inst.Close()
		},
	}, nil
}

// openDiskqueue: 64 MiB files, no periodic fsync (syncEvery 1<<40,
// syncTimeout 1 h), as in peerbench.
func openDiskqueue(dir string) diskqueue.Interface {
	return diskqueue.New("bench", dir, 64<<20, 0, 1<<20, 1<<40, time.Hour,
		func(diskqueue.LogLevel, string, ...interface{}) {})
}

func openDiskqueueStream(dir string) (*streamPeer, error) {
	q := openDiskqueue(dir)
	return &streamPeer{
		append: q.Put,
		next:   func() ([]byte, func(), error) { return <-q.ReadChan(), func() {}, nil },
		close:  q.Close,
	}, nil
}

// BenchmarkStreamVisibility: a writer goroutine appends b.N records of
// 1 KiB, each streamGap after the reader goroutine took the one before;
// the reader times each record from the clock in it to the moment it
// holds it (after pagelog's checksum check), and checks it is the next.
// append-ns is the writer's mean time in the append call, which includes
// waking a reader that sleeps. While it waits for the reader the writer
//
//   - writer=busy: keeps its core (a writer that goes on working): a
//     reader goroutine woken from sleep runs once the scheduler finds it
//     a thread on the other core;
//   - writer=yields: yields its core (runtime.Gosched), as a writer that
//     blocks for its next request would: the woken reader can run there.
func BenchmarkStreamVisibility(b *testing.B) {
	for _, p := range streamPeers {
		for _, yields := range []bool{false, true} {
			name := "reader=" + p.name + "/writer=busy"
			if yields {
				name = "reader=" + p.name + "/writer=yields"
			}
			b.Run(name, func(b *testing.B) { visibility(b, p.open, yields) })
		}
	}
}

func visibility(b *testing.B, open func(dir string) (*streamPeer, error), yields bool) {
	s, err := open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.close(); err != nil {
			b.Error(err)
		}
	}()
	lat := make(latencies, 0, b.N)
	var read atomic.Uint64
	done := make(chan error, 1)
	go func() {
		for i := uint64(0); i < uint64(b.N); i++ {
			body, release, err := s.next()
			if err != nil {
				done <- fmt.Errorf("record %d: %w", i, err)
				return
			}
			lat = append(lat, since(body))
			err = checkRecord(body, i)
			release()
			if err != nil {
				done <- err
				return
			}
			read.Store(i + 1)
		}
		done <- nil
	}()
	body := make([]byte, streamRecord)
	var appendTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for read.Load() < uint64(i) {
			select {
			case err := <-done:
				b.Fatal(err)
			default:
			}
			if yields {
				runtime.Gosched()
			}
		}
		pace(time.Now().Add(streamGap))
		stamp(body, uint64(i))
		start := time.Now()
		if err := s.append(body); err != nil {
			b.Fatal(err)
		}
		appendTime += time.Since(start)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	lat.report(b)
	b.ReportMetric(float64(appendTime.Nanoseconds())/float64(b.N), "append-ns")
}

// pace busy-waits until t.
func pace(t time.Time) {
	for time.Now().Before(t) {
	}
}

// BenchmarkStreamCommit: a durable consumer reads a record and commits
// its position, b.N times; only the commit is timed.
//
//   - system=pagelog-cursor/sync=none: Cursor.Next, then Commit (the
//     position goes into the page cache through a mapping: it survives a
//     crash of the process);
//   - system=pagelog-cursor/sync=always: the same with CursorOptions.Sync
//     SyncAlways (an fdatasync of the position file: a power failure);
//   - system=jetstream/sync=default: a durable pull consumer with
//     AckExplicit, Messages().Next, then DoubleAck (waits for the server to
//     confirm the ack, which moves the consumer's stored ack floor), the
//     server at its default sync (a 2 min SyncInterval);
//   - system=jetstream/sync=always: the same with the server's SyncAlways.
//
// go-diskqueue has no commit: the read position moves as a message is
// handed out of ReadChan, and its goroutine writes it to the metadata file
// every syncEvery reads or syncTimeout, which a consumer cannot wait for.
// Each record is appended (untimed) just before it is read.
func BenchmarkStreamCommit(b *testing.B) {
	for _, sync := range []engine.SyncPolicy{engine.SyncNone, engine.SyncAlways} {
		b.Run("system=pagelog-cursor/sync="+sync.String(), func(b *testing.B) {
			dir := b.TempDir()
			l, err := engine.Open(dir, engine.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			c, err := engine.OpenCursor(dir, "bench", engine.CursorOptions{Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			commitLoop(b, func(body []byte) error { _, err := l.Append(body); return err },
				func() ([]byte, func(), error) {
					r, err := c.Next(ctx)
					return r.Body, r.Release, err
				}, c.Commit)
			if got := c.Position(); got != uint64(b.N) {
				b.Fatalf("cursor at %d after %d commits", got, b.N)
			}
		})
	}
	for _, sync := range []string{"default", "always"} {
		b.Run("system=jetstream/sync="+sync, func(b *testing.B) {
			inst, cons, err := openJetStream(b.TempDir(), sync == "always", jetstream.AckExplicitPolicy)
			if err != nil {
				b.Fatal(err)
			}
			defer inst.Close()
			it, err := cons.Messages()
			if err != nil {
				b.Fatal(err)
			}
			defer it.Stop()
			ctx := context.Background()
			var m jetstream.Msg
			commitLoop(b, func(body []byte) error { _, err := inst.JS.Publish(ctx, "bench", body); return err },
				func() ([]byte, func(), error) {
					m, err = it.Next()
					if err != nil {
						return nil, nil, err
					}
					return m.Data(), func() {}, nil
				}, func() error { return m.DoubleAck(ctx) })
			info, err := cons.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if got := info.AckFloor.Stream; got != uint64(b.N) {
				b.Fatalf("consumer's ack floor at %d after %d acks", got, b.N)
			}
		})
	}
}

// commitLoop appends a record, reads it back (checking it is the next)
// and times commit, b.N times.
func commitLoop(b *testing.B, appendRec func([]byte) error, next func() ([]byte, func(), error), commit func() error) {
	body := make([]byte, streamRecord)
	lat := make(latencies, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		stamp(body, uint64(i))
		if err := appendRec(body); err != nil {
			b.Fatal(err)
		}
		got, release, err := next()
		if err != nil {
			b.Fatal(err)
		}
		err = checkRecord(got, uint64(i))
		release()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := commit(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	lat.report(b)
}
