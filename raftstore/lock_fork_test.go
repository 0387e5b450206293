//go:build unix

package raftstore

import (
	"syscall"
	"testing"
)

// TestCloseReleasesLockSharedWithChild: a process forked while the store is
// open shares its lock's open file description until it execs. Close must
// release the lock for that copy too, so that an Open of the same directory
// right after Close succeeds. A second descriptor of the lock file stands in
// for the child's copy.
func TestCloseReleasesLockSharedWithChild(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	child, err := syscall.Dup(int(s.lock.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(child)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, testOptions())
	if err != nil {
		t.Fatalf("Open right after Close, the lock's file description still shared: %v", err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
}
