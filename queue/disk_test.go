package queue

import (
	"strings"
	"testing"
	"time"
)

// Once every message is deleted, the queue's directory holds the active
// segment of its message log, at most one segment's worth more (the
// segment prepared ahead, or a dropped one kept for reuse: whole, unlike a
// new prepared file, which is allocated an eighth), and the side logs,
// whose segments are a quarter of the message log's at most. Deleted
// messages take no disk.
func TestQueueDiskAfterAllDeleted(t *testing.T) {
	const segBytes = 64 << 10
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock, func(o *Options) { o.Log.SegmentBytes = segBytes })
	defer mustCloseQueue(t, q)
	body := strings.Repeat("x", 1000)
	const n = 2 << 10 // 2 MiB of messages: 32 segments
	for i := range n {
		mustSend(t, q, body)
		if i%256 == 255 {
			clock.Advance(time.Second)
		}
	}
	for i := range n {
		m, ok := tryRecv(t, q)
		if !ok {
			t.Fatalf("message %d: nothing to receive", i)
		}
		mustDelete(t, q, m.Offset)
		if i%64 == 63 {
			clock.Advance(time.Second)
		}
	}
	clock.Advance(time.Second) // a checkpoint: the head passes the last delete
	// Everything: segments, spare files, the side logs and checkpoints
	// (a delete-log segment, index files, queue.head: a page each).
	bound := int64(2*segBytes + segBytes/4 + 8<<10)
	// Segments below the head go in the background, and the spare files
	// past the engine's keep are removed there too: wait for both, for
	// long enough that only a stuck drop fails (a loaded machine is slow).
	segs, bytes, spare := 0, int64(0), int64(0)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		segs, bytes, spare = dirUsage(t, dir)
		if segs <= 1 && bytes+spare <= bound {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := q.Stats()
	t.Logf("after %d messages sent and deleted: %d message-log segments, %d bytes in the directory and %d in the engine's spare files",
		n, segs, bytes, spare)
	if st.Messages != 0 {
		t.Fatalf("%d messages left", st.Messages)
	}
	if segs > 2 {
		t.Errorf("%d message-log segments left, want the active one and at most one more", segs)
	}
	if all := bytes + spare; all > bound {
		t.Errorf("the directory holds %d bytes, more than two segments and a side log's (%d)", all, bound)
	}
	if t.Failed() {
		listDir(t, dir)
	}
}
