package rqueue

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// slowSink is a memSink whose writes take a while: Persist's walk of the
// queue's messages (queue.Messages) blocks on it while the queue moves.
type slowSink struct {
	memSink
	delay time.Duration
}

func (s *slowSink) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	return s.memSink.Write(p)
}

// Snapshots taken again and again of an FSM whose queue moves delayed
// messages out of held segments (4 KiB segments, MaxHeldSegments 1,
// checkpoints every few milliseconds), persisted while sends, hand-outs
// and deletes of other messages make the queue move and checkpoint: each
// restored FSM's digest equals the source's when the snapshot was taken.
func TestFSMSnapshotsBesideMovesRestoreSameDigest(t *testing.T) {
	src := newMovingFSM(t, 5*time.Millisecond)
	a := &applier{f: src}
	filler := func(i int) []byte { return []byte(fmt.Sprintf("filler %d %s", i, strings.Repeat("f", 300))) }
	n := 0
	// churn sends k fillers, receives what is ready and deletes it.
	churn := func(k int) {
		var ids []uint64
		for range k {
			ids = append(ids, a.send(t, Outgoing{Body: filler(n)}))
			n++
		}
		got := receiveAll(t, src)
		var del []uint64
		for id := range got {
			del = append(del, id)
		}
		a.del(t, del...)
	}
	held := 0
	failures := 0
	for round := range 40 {
		for range 3 {
			a.send(t, Outgoing{
				Body: []byte(fmt.Sprintf("held %d %s", held, strings.Repeat("h", 1500+held%100))),
				Due:  time.Now().Add(time.Hour).UnixMilli(),
			})
			held++
			churn(12)
		}
		src.mu.Lock()
		var diag []string
		seen := map[uint64]bool{}
		resume := src.store.PauseDrops()
		lerr := queue.StoreMessages(src.sdir, DefaultQueue, func(m queue.Stored) bool {
			_, ok := src.def().idOf[m.Offset]
			if !ok && m.Err != nil {
				return true // a segment dropped before the pause, being reused
			}
			if !ok || m.Err != nil || seen[m.Offset] {
				diag = append(diag, fmt.Sprintf("offset %d record %d known %v twice %v err %v", m.Offset, m.Record, ok, seen[m.Offset], m.Err))
			}
			seen[m.Offset] = true
			return true
		})
		resume()
		for off := range src.def().idOf {
			if !seen[off] {
				diag = append(diag, fmt.Sprintf("live %d left out", off))
			}
		}
		src.mu.Unlock()
		if lerr != nil || len(diag) > 0 {
			t.Errorf("round %d: Messages of the source beside its own moves: %v %v", round, lerr, diag)
		}
		// Digest reads the queue's files beside its moves too, under a
		// pause of the queue's drops.
		want, err := src.Digest()
		if err != nil {
			t.Fatalf("round %d: Digest: %v", round, err)
		}
		s, err := src.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		sink := &slowSink{delay: 15 * time.Millisecond}
		var wg sync.WaitGroup
		var perr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			perr = s.Persist(sink)
		}()
		pairs := s.(*snapshot).queues[0].pairs
		go func() {
			defer wg.Done()
			// The walk Persist makes, watched: every live message at the
			// snapshot, in order.
			var last queue.Stored
			var got []queue.Stored
			_ = queue.StoreMessages(src.sdir, DefaultQueue, func(m queue.Stored) bool {
				if len(got) > 0 && m.Offset <= last.Offset {
					t.Errorf("round %d: Messages beside moves gave %d (record %d, err %v) after %d (record %d)", round, m.Offset, m.Record, m.Err, last.Offset, last.Record)
				}
				last = m
				got = append(got, m)
				if len(got)%30 == 0 {
					time.Sleep(15 * time.Millisecond) // as a flush to a slow sink
				}
				return true
			})
			seen := map[uint64]bool{}
			for _, m := range got {
				seen[m.Offset] = true
			}
			for _, p := range pairs {
				if !seen[p[0]] {
					t.Errorf("round %d: Messages beside moves left out %d", round, p[0])
				}
			}
		}()
		stop := make(chan struct{})
		churned := make(chan struct{})
		go func() {
			defer close(churned)
			for {
				select {
				case <-stop:
					return
				default:
				}
				churn(20)
			}
		}()
		wg.Wait()
		close(stop)
		<-churned
		s.Release()
		if perr != nil {
			t.Errorf("round %d: Persist: %v", round, perr)
			failures++
			continue
		}
		dst := newFSM(t)
		if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
			t.Fatalf("round %d: Restore: %v", round, err)
		}
		if got := digestOf(t, dst); got != want {
			var lost []uint64
			dst.mu.Lock()
			for _, p := range s.(*snapshot).queues[0].pairs {
				if _, ok := dst.def().offOf[p[1]]; !ok {
					lost = append(lost, p[0])
				}
			}
			dst.mu.Unlock()
			sb := sink.Bytes()
			t.Errorf("round %d: restored %+v, want %+v; left out: the messages at local offsets %v (the snapshot says it holds %d messages, %d pairs)", round, got, want, lost, sb[len(sb)-5], len(pairs))
			failures++
		}
		dst.Close()
	}
	src.mu.Lock()
	st := src.def().q.Stats()
	src.mu.Unlock()
	t.Logf("%d held messages, %d moved since open, %d segments, %d failures", held, st.Moved, st.Log.Segments, failures)
	if st.Moved < 20 {
		t.Fatalf("only %d moves", st.Moved)
	}
}
