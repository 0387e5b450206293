package engine

import (
	"bytes"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestSyncFailureIsSticky: once an fdatasync fails the log acknowledges
// nothing that sync covered, refuses every later append (the kernel may have
// dropped the dirty pages and would report success on a retry), still
// serves reads, and a reopen recovers and appends again.
func TestSyncFailureIsSticky(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	opts := Options{Sync: SyncAlways}
	opts.datasync = func(f *os.File) error {
		if fail.Load() {
			return syscall.EIO
		}
		return f.Sync()
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := l.Append([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	fail.Store(true)
	if _, err := l.Append([]byte("lost")); !errors.Is(err, ErrSyncFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("append whose sync failed: %v, want ErrSyncFailed wrapping EIO", err)
	}
	fail.Store(false) // a retry would succeed: the log must not believe it
	if _, err := l.Append([]byte("after")); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("append after a failed sync: %v, want ErrSyncFailed", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Sync after a failed sync: %v", err)
	}
	if d := l.Durable(); d > 10 {
		t.Fatalf("Durable = %d covers the record whose sync failed", d)
	}
	for i := uint64(0); i < 10; i++ {
		r, err := l.Read(i)
		if err != nil || !bytes.Equal(r.Body, []byte{byte(i)}) {
			t.Fatalf("read %d after the failure: %v", i, err)
		}
		r.Release()
	}
	if err := l.Close(); err != nil {
		t.Logf("close after a failed sync: %v", err)
	}
	if _, err := os.Stat(dir + "/" + cleanName); err == nil {
		t.Fatal("a log whose sync failed left a clean-close marker")
	}
	l, err = Open(dir, Options{Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	off, err := l.Append([]byte("again"))
	if err != nil || off < 10 {
		t.Fatalf("append after reopen: %d %v", off, err)
	}
}
