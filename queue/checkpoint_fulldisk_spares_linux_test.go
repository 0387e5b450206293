package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// TestCheckpointFullDiskTakesDeadLetterSpares: on a full disk, the queue's
// own logs have given up their spare files to one head checkpoint; the
// next one (the head moved again) finds none of theirs, while its
// dead-letter queue, on the same disk, holds a prepared segment. The
// head checkpoint, and Close, find no room although the queue's
// directories hold spare files.
func TestCheckpointFullDiskTakesDeadLetterSpares(t *testing.T) {
	dir, fsdir := fullDiskTmpfs(t, 32)
	opts := func(o *Options) {
		o.Log = engine.Options{SegmentBytes: 1 << 20}
		o.CheckpointInterval = time.Millisecond
		o.Clock = nil
		o.MaxReceives = 1
		o.Visibility = time.Hour
	}
	q := openTestQueue(t, dir, newFakeClock(), opts)
	m := newAckModel(4000)
	for range 1500 {
		if err := m.send(q); err != nil {
			t.Fatal(err)
		}
	}
	got := drain(t, q)
	// 200 dead letters: past half of the dead-letter queue's first
	// segment, whose next one is prepared.
	for _, msg := range got[:200] {
		if err := q.Release(msg.Offset); err != nil {
			t.Fatal(err)
		}
	}
	for _, msg := range got[200:1300] {
		if err := m.del(q, msg.Offset); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the head checkpoint at 1300 and the dead letters' prepared segment", func() bool {
		h, err := readHead(dir)
		_, perr := os.Stat(filepath.Join(DeadLetterPath(dir), "prepared.log"))
		return err == nil && h.head == got[1300].Offset && perr == nil
	})
	ballast := fillTmpfs(t, fsdir)
	// Each head checkpoint on the full disk takes spare files of the
	// queue's own logs, until they have none.
	stuck := false
	for k := 1300; k < 1490 && !stuck; k += 10 {
		// Whatever the last checkpoint freed (the old queue.head's
		// page, a dropped segment) is taken again.
		fillMore(t, fsdir, fmt.Sprintf("ballast-%d", k))
		for _, msg := range got[k : k+10] {
			if err := m.del(q, msg.Offset); err != nil {
				t.Fatal(err)
			}
		}
		want := got[k+10].Offset
		deadline := time.Now().Add(2 * time.Second)
		for {
			h, err := readHead(dir)
			if err == nil && h.head == want {
				break
			}
			if time.Now().After(deadline) {
				if spares := spareFiles(dir); len(spares) > 0 {
					logQueueFiles(t, dir)
					t.Errorf("no head checkpoint at %d on the full disk in 2 s while the queue's directories hold spare files %v: queue.head %+v, %v; checkpoint error %v",
						want, spares, h, err, q.Stats().CheckpointError)
				}
				stuck = true
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	spares := spareFiles(dir)
	closeErr := q.Close()
	t.Logf("Close: %v", closeErr)
	if closeErr != nil && len(spares) > 0 {
		t.Errorf("Close on the full disk failed while the queue's directories held spare files %v: %v", spares, closeErr)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	removeMore(t, fsdir)
	q = openTestQueue(t, dir, newFakeClock(), opts)
	defer mustCloseQueue(t, q)
	m.check(t, q)
}

// fillMore takes every free block of the file system of fsdir with a
// new file name (fillTmpfs's file stays as it is), page by page.
func fillMore(t *testing.T, fsdir, name string) {
	t.Helper()
	f, err := os.Create(filepath.Join(fsdir, name))
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return
		}
		t.Fatal(err)
	}
	defer f.Close()
	var size int64
	for _, step := range []int64{64 << 10, 4 << 10} {
		for {
			err := syscall.Fallocate(int(f.Fd()), 0, size, step)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			size += step
		}
	}
}

// removeMore removes the files fillMore made.
func removeMore(t *testing.T, fsdir string) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(fsdir, "ballast-*"))
	for _, p := range m {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}
