//go:build unix

package engine

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloseReleasesLockSharedWithChild: a process forked while the log is
// open shares the lock's open file description until it execs. Close
// must release the lock for it too, so that an Open of the same directory
// right after Close succeeds (a queue's tests saw ErrLocked while other
// tests started processes). A second descriptor of the lock file stands
// in for the child's copy.
func TestCloseReleasesLockSharedWithChild(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	child, err := unix.Dup(int(l.lockFile.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(child)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open right after Close, the lock's file description still shared: %v", err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
}
