package main

import (
	"github.com/pagelog/pagelog/internal/tmpfstest"

	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"testing"
)

// fullTmpfs mounts a small tmpfs and fills it, or skips the test where a
// test may not mount one. It returns the tmpfs and the file that fills it.
func fullTmpfs(t *testing.T) (fsdir, ballast string) {
	t.Helper()
	fsdir = tmpfstest.Mount(t, "1m")
	ballast = filepath.Join(fsdir, "ballast")
	f, err := os.Create(ballast)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off := int64(0); ; off += 4096 {
		if err := syscall.Fallocate(int(f.Fd()), 0, off, 4096); errors.Is(err, syscall.ENOSPC) {
			return fsdir, ballast
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// noFault runs f with memory faults turned into panics, and fails the
// test if one comes: a store into a hole of a file on a full file system
// raises SIGBUS, which would otherwise end the test binary.
func noFault(t *testing.T, what string, f func()) {
	t.Helper()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s faulted: %v", what, r)
		}
	}()
	f()
}

// TestBenchLimitsOnFullDisk: the machine-limit figures of pagelog bench,
// on a full disk, fail with ENOSPC before they map their file, never with
// a SIGBUS when they fault its pages in.
func TestBenchLimitsOnFullDisk(t *testing.T) {
	fsdir, _ := fullTmpfs(t)
	var err error
	noFault(t, "benchLimits on a full disk", func() { _, err = benchLimits(fsdir) })
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("benchLimits on a full disk: %v, want an error wrapping ENOSPC", err)
	}
}

// TestDemoMarksFileOnFullDisk: the queue demo's marks file, made on a full
// file system, fails with ENOSPC when it is made, never with a SIGBUS at
// the first mark stored through its mapping; the child's call maps the
// parent's file as it is.
func TestDemoMarksFileOnFullDisk(t *testing.T) {
	fsdir, ballast := fullTmpfs(t)
	path := filepath.Join(fsdir, "queue-demo.marks")
	const n = 4096
	var err error
	noFault(t, "a mark stored on a full disk", func() {
		var marks []uint32
		if marks, err = mapMarks(path, n, true); err == nil {
			atomic.OrUint32(&marks[n-1], markReceived)
			_ = unmapMarks(marks)
		}
	})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("mapMarks on a full disk: %v, want an error wrapping ENOSPC", err)
	}
	if err := os.Truncate(ballast, 0); err != nil {
		t.Fatal(err)
	}
	parent, err := mapMarks(path, n, true)
	if err != nil {
		t.Fatal(err)
	}
	defer unmapMarks(parent)
	atomic.OrUint32(&parent[n-1], markReceived)
	child, err := mapMarks(path, n, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unmapMarks(child)
	if atomic.LoadUint32(&child[n-1]) != markReceived {
		t.Fatalf("the child's mapping reads mark %#x, want the parent's %#x", child[n-1], markReceived)
	}
	if _, err := mapMarks(path, n+1, false); err == nil {
		t.Fatal("the child mapped a marks file of another size")
	}
}
