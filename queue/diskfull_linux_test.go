package queue

import (
	"github.com/pagelog/pagelog/internal/tmpfstest"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestQueueDeleteLogENOSPC fills a real (tmpfs) file system while
// messages are deleted: the delete that needs a new delete-log segment
// fails with an error wrapping ENOSPC and changes nothing, every delete
// that returned nil stays deleted across a restart, and no message whose
// delete failed, or that was never deleted, is lost: each is handed out
// again after the restart. Deletes work again once there is space, the
// failed ones included.
func TestQueueDeleteLogENOSPC(t *testing.T) {
	old := deleteSegmentBytes
	deleteSegmentBytes = 24 * 32 // 32 delete records per segment
	t.Cleanup(func() { deleteSegmentBytes = old })
	fsdir := tmpfstest.Mount(t, "16m")
	dir := filepath.Join(fsdir, "q")
	clock := newFakeClock()
	small := func(o *Options) { o.Log.MaxRecordBytes = 1024 }
	q := openTestQueue(t, dir, clock, small)
	const n = 400
	for i := range n {
		mustSend(t, q, fmt.Sprint("body ", i))
	}
	got := drain(t, q)
	if len(got) != n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	ballast := fillTmpfs(t, fsdir)

	deleted := map[uint64]bool{}
	var failed []uint64
	var full error
	for _, m := range got {
		err := q.Delete(m.Offset)
		if err == nil {
			deleted[m.Offset] = true
			continue
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Delete(%d) on a full disk: %v, want nil or an error wrapping ENOSPC", m.Offset, err)
		}
		full = err
		failed = append(failed, m.Offset)
		if st := q.Stats(); st.InFlight != n-len(deleted) {
			t.Fatalf("a failed Delete changed the queue's state: %d in flight, want %d", st.InFlight, n-len(deleted))
		}
		if len(failed) == 3 {
			break
		}
	}
	if full == nil {
		t.Fatalf("%d deletes on a full disk all succeeded: the delete log never needed space (make its segments smaller)", len(deleted))
	}
	if err := q.DeleteBatch(failed); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("DeleteBatch on a full disk: %v, want ENOSPC", err)
	}
	t.Logf("%d deletes before the disk was full, then: %v", len(deleted), full)

	// Space again: the next deletes work (the first failed one, and every
	// other message; the rest stay for the restart).
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	mustDelete(t, q, failed[0])
	deleted[failed[0]] = true
	failed = failed[1:]
	for _, m := range got {
		if deleted[m.Offset] || slices.Contains(failed, m.Offset) || m.Offset%2 == 0 {
			continue
		}
		if err := q.Delete(m.Offset); err != nil {
			t.Fatalf("Delete(%d) once there is space: %v", m.Offset, err)
		}
		deleted[m.Offset] = true
	}
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock, small)
	defer mustCloseQueue(t, q)
	var want []uint64
	for _, m := range got {
		if !deleted[m.Offset] {
			want = append(want, m.Offset)
		}
	}
	again := offsetsOf(drain(t, q))
	for _, off := range failed {
		if !slices.Contains(again, off) {
			t.Errorf("message %d, whose Delete failed (ENOSPC) and so was never acknowledged as deleted, is not handed out after the restart: lost", off)
		}
	}
	if !slices.Equal(again, want) {
		t.Fatalf("after the restart handed out %d messages %v..., want the %d not deleted %v...",
			len(again), again[:min(len(again), 8)], len(want), want[:min(len(want), 8)])
	}
}

// fillTmpfs takes every free block of the file system that holds dir with
// a ballast file, and returns its path. It allocates in steps of 1 MiB,
// then 64 KiB, then 4 KiB, each until the file system says ENOSPC: what
// statfs calls available is not always what there is.
func fillTmpfs(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var size int64
	for _, step := range []int64{1 << 20, 64 << 10, 4 << 10} {
		for k := 0; ; k++ {
			err := syscall.Fallocate(int(f.Fd()), 0, size, step)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil || k == 1<<16 {
				t.Fatalf("the ballast does not fill the file system: %v at %d bytes", err, size)
			}
			size += step
		}
	}
	return path
}
