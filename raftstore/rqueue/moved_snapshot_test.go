package rqueue

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// A message the local queue moved out of a held segment (a delay far
// ahead holds it) is in the snapshot, and the restored FSM holds what the
// source does. Snapshots walk the queue's messages in offset order, and a
// moved message's copy lies at the end of the log.
func TestFSMSnapshotKeepsMovedMessages(t *testing.T) {
	src := newMovingFSM(t, 20*time.Millisecond)
	a := &applier{f: src}
	held := a.send(t, Outgoing{Body: []byte("held far ahead"), Due: time.Now().Add(time.Hour).UnixMilli()})
	var ids []uint64
	for i := range 200 {
		ids = append(ids, a.send(t, Outgoing{Body: body(i)}))
	}
	a.del(t, ids[:190]...)
	receiveAll(t, src) // the cursor passes the held message's segment
	deadline := time.Now().Add(20 * time.Second)
	for {
		src.mu.Lock()
		st := src.def().q.Stats()
		src.mu.Unlock()
		if st.Moved > 0 && st.Log.Segments <= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the held message never moved: %+v", st)
		}
		// Sends make the queue look at its segments (every 64).
		ids = append(ids, a.send(t, Outgoing{Body: body(len(ids))}))
		a.del(t, ids[len(ids)-1])
		receiveAll(t, src)
	}
	want := digestOf(t, src)
	if want.Messages != 11 {
		t.Fatalf("%d messages, want 11 (the held one and ten)", want.Messages)
	}
	snap := snapshotOf(t, src)

	dst := newFSM(t)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(t, dst); got != want {
		t.Fatalf("restored %+v, want %+v (held message %d)", got, want, held)
	}
}

// newMovingFSM makes an FSM whose queue moves held messages soon: 4 KiB
// segments, MaxHeldSegments 1, a checkpoint every interval.
func newMovingFSM(t *testing.T, interval time.Duration) *FSM {
	t.Helper()
	f, err := NewFSM(filepath.Join(t.TempDir(), "queue"), queue.Options{
		Visibility:         time.Minute,
		Log:                engine.Options{SegmentBytes: 4096},
		CheckpointInterval: interval,
		MaxHeldSegments:    1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
