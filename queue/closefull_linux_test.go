package queue

import (
	"github.com/pagelog/pagelog/internal/tmpfstest"

	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// TestQueueCloseOnFullDisk: a queue keeps spare segment files (one kept
// for reuse, or its next segment prepared ahead). On a disk full to the
// last block, deletes still move the head: its checkpoint is written in
// the space of the spare files, and lets the segments behind it go.
// Close then writes the logs' clean-close markers, and the queue opens
// again with every delete kept and nothing lost.
func TestQueueCloseOnFullDisk(t *testing.T) {
	fsdir := tmpfstest.Mount(t, "32m")
	dir := filepath.Join(fsdir, "q")
	o := func(o *Options) {
		o.Log = engine.Options{SegmentBytes: 1 << 20}
		o.CheckpointInterval = time.Millisecond
		o.Clock = nil
	}
	q := openTestQueue(t, dir, newFakeClock(), o)
	body := make([]byte, 4000)
	const n = 1500 // about 6 segments
	for range n {
		if _, err := q.Send(body); err != nil {
			t.Fatal(err)
		}
	}
	got := drain(t, q)
	for _, m := range got[:n-10] {
		mustDelete(t, q, m.Offset)
	}
	time.Sleep(100 * time.Millisecond) // checkpoints drop the segments behind the head
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	t.Logf("files before the disk fills: %v", names)
	ballast := fillTmpfs(t, fsdir)
	// Deletes on the full disk: the delete log's segment has room, and
	// the final checkpoint has a new head to write.
	for _, m := range got[n-10 : n-5] {
		mustDelete(t, q, m.Offset)
	}
	// The next head checkpoint is written all the same: the logs' spare
	// files give it the space.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		h, err := readHead(dir)
		if err == nil && h.head == got[n-5].Offset {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no head checkpoint on the full disk: queue.head %+v, %v; want head %d", h, err, got[n-5].Offset)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close on a full disk: %v", err)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	q = openTestQueue(t, dir, newFakeClock(), o)
	defer mustCloseQueue(t, q)
	if r := q.Recovery(); r.HeadFrom != "checkpoint" {
		t.Errorf("reopened with head from %q, want the final checkpoint's", r.HeadFrom)
	}
	again := offsetsOf(drain(t, q))
	want := offsetsOf(got[n-5:])
	if !slices.Equal(again, want) {
		t.Fatalf("after Close on a full disk and a restart: handed out %v, want %v", again, want)
	}
}
