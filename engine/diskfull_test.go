package engine

import (
	"github.com/pagelog/pagelog/internal/tmpfstest"

	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory (see
// tmpfstest: it skips where a test may not mount one, and fails instead
// under `make test` as root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	return tmpfstest.Mount(t, size)
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
	deadline := time.Now().Add(time.Minute)
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

// noFault runs f with memory faults turned into panics, and fails the
// test if one comes: a store into a hole of a file on a full file system
// raises SIGBUS, which would otherwise end the test binary.
func noFault(t *testing.T, what string, f func()) {
	t.Helper()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s faulted: %v\n%s", what, r, debug.Stack())
		}
	}()
	f()
}

// closedLogOnTmpfs makes a log of n records of body in a 4 MiB tmpfs and
// closes it; it returns the tmpfs and the log's directory.
func closedLogOnTmpfs(t *testing.T, opts Options, body []byte, n int) (fsdir, dir string) {
	t.Helper()
	fsdir = mountTmpfs(t, "4m")
	dir = filepath.Join(fsdir, "log")
	l := mustOpen(t, dir, opts)
	for i := 0; i < n; i++ {
		if _, err := l.Append(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fsdir, dir
}

// openOnFullDisk fills the file system at fsdir and opens the log in dir
// writable, failing the test if the Open faults. It returns the ballast
// file that fills the file system.
func openOnFullDisk(t *testing.T, fsdir, dir string, opts Options) (l *Log, ballast string, err error) {
	t.Helper()
	// Without log.clean (a writer that was killed): an Open that removes
	// it frees a page, which the file under test would take.
	if err := os.Remove(filepath.Join(dir, cleanName)); err != nil {
		t.Fatal(err)
	}
	ballast = fillDisk(t, fsdir)
	noFault(t, "a writable Open on a full disk", func() { l, err = Open(dir, opts) })
	return l, ballast, err
}

// holeOfSize returns a function that makes path a new file of size bytes
// with no block allocated (ftruncate), as a process that ended between
// making a file and storing in it leaves it.
func holeOfSize(size int64) func(path string) error {
	return func(path string) error {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return err
		}
		return os.Truncate(path, size)
	}
}

// TestWritableOpenOnFullDiskWithoutNotifyFile: a writable Open on a full
// file system of a log whose log.notify is missing (a log older than the
// file, or one whose file was removed), or is a hole of its size (a writer
// ended between making the file and storing in it), never faults: the
// file's blocks are allocated before the first store, and a log that
// cannot allocate them goes on without it. Once there is space, the next
// Open makes it again.
func TestWritableOpenOnFullDiskWithoutNotifyFile(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(path string) error
	}{
		{"missing", os.Remove},
		{"hole", holeOfSize(notifySize)},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{SegmentBytes: 256 << 10}
			body := bytes.Repeat([]byte{7}, 1000)
			fsdir, dir := closedLogOnTmpfs(t, opts, body, 10)
			notify := filepath.Join(dir, notifyName)
			if err := c.damage(notify); err != nil {
				t.Fatal(err)
			}
			l, ballast, err := openOnFullDisk(t, fsdir, dir, opts)
			if err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("Open on a full disk: %v, want success or ENOSPC", err)
				}
			} else {
				r, err := l.Read(9)
				if err != nil || !bytes.Equal(r.Body, body) {
					t.Fatalf("Read(9) after the Open on a full disk: %v", err)
				}
				r.Release()
			}
			if err := os.Remove(ballast); err != nil {
				t.Fatal(err)
			}
			if l != nil {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			l = mustOpen(t, dir, opts)
			if m := openNotifyView(dir); m == nil {
				t.Fatal("no usable log.notify after an Open with space")
			} else {
				m.release()
			}
		})
	}
}

// TestOpenCursorOnFullDisk: opening a cursor on a full file system, whose
// position file is new or a hole of its size (an opener ended between
// making it and storing in it), fails with an error wrapping ENOSPC and
// never faults: the file's blocks are allocated before the first store.
// Once there is space, the cursor opens and commits.
func TestOpenCursorOnFullDisk(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(path string) error
	}{
		{"new", func(string) error { return nil }},
		{"hole", holeOfSize(cursorFileSize)},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsdir, dir := closedLogOnTmpfs(t, Options{SegmentBytes: 256 << 10}, []byte("one"), 1)
			if err := os.Mkdir(filepath.Join(dir, cursorDir), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := c.make(filepath.Join(dir, cursorDir, "c")); err != nil {
				t.Fatal(err)
			}
			ballast := fillDisk(t, fsdir)
			var cur *Cursor
			var err error
			noFault(t, "OpenCursor on a full disk", func() { cur, err = OpenCursor(dir, "c", CursorOptions{}) })
			if !errors.Is(err, syscall.ENOSPC) {
				if cur != nil {
					_ = cur.Close()
				}
				t.Fatalf("OpenCursor on a full disk: %v, want an error wrapping ENOSPC", err)
			}
			if err := os.Remove(ballast); err != nil {
				t.Fatal(err)
			}
			cur, err = OpenCursor(dir, "c", CursorOptions{})
			if err != nil {
				t.Fatalf("OpenCursor once there is space: %v", err)
			}
			defer cur.Close()
			if err := cur.Seek(1); err != nil {
				t.Fatal(err)
			}
			if err := cur.Commit(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWritableOpenOnFullDiskOfSparseCopy: a log whose active segment's
// files hold holes where they hold zeros, as a copy made by a tool that
// keeps files sparse (cp, rsync -S, tar -S) leaves them, opened writable
// on a full file system: neither the Open nor the appends after it fault.
// Each file's blocks are allocated before the first store: the Open fails
// with ENOSPC, and once there is space the log opens and appends.
func TestWritableOpenOnFullDiskOfSparseCopy(t *testing.T) {
	for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
		t.Run(suffix[1:], func(t *testing.T) {
			// An index entry per record, so that appends soon store into
			// the index files' second page.
			opts := Options{SegmentBytes: 256 << 10, IndexIntervalBytes: 1}
			body := bytes.Repeat([]byte{7}, 100)
			fsdir, dir := closedLogOnTmpfs(t, opts, body, 10)
			// Past the first page, where these records end: zeros made
			// holes, as the copy does.
			path := filepath.Join(dir, segment.Name(0, suffix))
			punchFrom(t, path, 4096)
			l, ballast, err := openOnFullDisk(t, fsdir, dir, opts)
			if err == nil {
				n := 10
				noFault(t, "appends on a full disk", func() {
					for ; n < 4000 && err == nil; n++ {
						_, err = l.Append(body)
					}
				})
				_ = l.Close()
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Open and appends on a full disk: %v, want an error wrapping ENOSPC", err)
			}
			if err := os.Remove(ballast); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, dir, opts)
			for i := 0; i < 4000; i++ {
				if _, err := l.Append(body); err != nil {
					t.Fatalf("append once there is space: %v", err)
				}
			}
			if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
				t.Fatalf("Verify: %+v, %v", rep, err)
			}
		})
	}
}
