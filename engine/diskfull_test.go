package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory, or skips the
// test where this machine does not let a test mount one (not root, no
// CAP_SYS_ADMIN, a sandbox without mount).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): the full-disk case is covered by TestFullDiskAtRoll's injected ENOSPC", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestDiskFullTmpfs fills a real, small file system: Append fails with an
// error wrapping ENOSPC when a new segment cannot be allocated, everything
// acknowledged before still reads, and appends go on once space is freed.
func TestDiskFullTmpfs(t *testing.T) {
	fsdir := mountTmpfs(t, "4m")
	ballast := filepath.Join(fsdir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(fsdir, "log")
	l, err := Open(dir, Options{SegmentBytes: 256 << 10, MaxRecordBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	body := func(i uint64) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 1000) }
	var acked uint64
	var full error
	for i := uint64(0); i < 10_000; i++ {
		off, err := l.Append(body(i))
		if err != nil {
			full = err
			break
		}
		if off != i {
			t.Fatalf("offset %d, want %d", off, i)
		}
		acked = i + 1
	}
	if !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("filling the file system: err = %v after %d appends, want ENOSPC", full, acked)
	}
	if acked == 0 {
		t.Fatal("nothing fitted")
	}
	if _, err := l.Append(body(acked)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("second append on a full disk: %v", err)
	}
	for i := uint64(0); i < acked; i++ {
		r, err := l.Read(i)
		if err != nil || !bytes.Equal(r.Body, body(i)) {
			t.Fatalf("Read(%d) on a full disk: %v", i, err)
		}
		r.Release()
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	off, err := l.Append(body(acked))
	if err != nil || off != acked {
		t.Fatalf("append after freeing space: %d, %v (want %d)", off, err, acked)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if rep, err := ro.Verify(nil); err != nil || !rep.Healthy() || rep.Records != acked+1 {
		t.Fatalf("after the full disk: %+v, %v", rep, err)
	}
}

// TestCloseOnFullDiskFreesKeptFilesFirst: a log whose disk is full while
// it keeps a dropped segment's file for reuse closes cleanly: Close
// removes the spare files before it writes log.clean, whose temporary
// file needs the space they held.
func TestCloseOnFullDiskFreesKeptFilesFirst(t *testing.T) {
	fsdir := mountTmpfs(t, "4m")
	dir := filepath.Join(fsdir, "log")
	l, err := Open(dir, Options{SegmentBytes: 256 << 10, RecycleSegments: 2})
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte{7}, 1000)
	for l.Stats().Segments < 5 {
		if _, err := l.Append(body); err != nil {
			t.Fatal(err)
		}
	}
	segs := *l.segs.Load()
	if _, err := l.DropBefore(segs[2].Base()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !hasRecycled(t, dir) {
		if time.Now().After(deadline) {
			t.Fatal("no dropped file was kept for reuse")
		}
		time.Sleep(time.Millisecond)
	}
	fillDisk(t, fsdir)
	if err := l.Close(); err != nil {
		t.Fatalf("Close on a full disk with a kept file: %v", err)
	}
	if hasRecycled(t, dir) {
		t.Fatal("Close left a kept file")
	}
	l = mustOpen(t, dir, Options{SegmentBytes: 256 << 10, RecycleSegments: 2})
	defer l.Close()
	if !l.Recovery().Clean {
		t.Fatalf("the reopen after Close found no clean-close marker: %+v", l.Recovery())
	}
}

// hasRecycled reports whether dir holds a dropped file kept for reuse.
func hasRecycled(t *testing.T, dir string) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if isRecycledName(e.Name()) {
			return true
		}
	}
	return false
}
