package engine

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A small file of the log (log.meta, log.id, log.clean, log.recovery)
// grown huge (sparse: it costs no disk) is damaged, and is never read
// whole: a reader that did would allocate its size.
func TestOversizedSmallFilesAreNotReadWhole(t *testing.T) {
	const huge = 64 << 20
	for _, name := range []string{metaName, logIDName, cleanName, recoveryName} {
		t.Run(name, func(t *testing.T) {
			dir := closedLog(t)
			if err := os.Truncate(filepath.Join(dir, name), huge); err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				f, err := os.Create(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				err = f.Truncate(huge)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			var roErr error
			n := allocated(func() {
				l, err := OpenReadOnly(dir, Options{})
				if err == nil {
					l.Close()
				}
				roErr = err
			})
			if n > 16<<20 {
				t.Errorf("OpenReadOnly (%v) allocated %d bytes for a %d-byte %s", roErr, n, huge, name)
			}
			var err error
			n = allocated(func() { err = openAndClose(dir, Options{}) })
			if n > 16<<20 {
				t.Errorf("Open (%v) allocated %d bytes for a %d-byte %s", err, n, huge, name)
			}
			if name == metaName && !errors.Is(err, ErrBadFile) && err != nil {
				t.Errorf("Open: %v, want nil or ErrBadFile", err)
			}
		})
	}
}

// An index file grown huge (sparse) beside a segment is not read whole by
// a read-only open or by Verify: no index of the segment can be larger
// than one entry for each 16 bytes of it.
func TestOversizedIndexFileIsNotReadWhole(t *testing.T) {
	const huge = 1 << 30
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 20, func(uint64) int { return 100 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "*.index"))
	if len(idx) == 0 {
		t.Fatal("no index file")
	}
	if err := os.Truncate(idx[0], huge); err != nil {
		t.Fatal(err)
	}
	var verr error
	var rep VerifyReport
	n := allocated(func() {
		ro, err := OpenReadOnly(dir, Options{})
		if err != nil {
			t.Error(err)
			return
		}
		defer ro.Close()
		if _, err := ro.Read(0); err != nil {
			t.Error(err)
		}
		rep, verr = ro.Verify(nil)
	})
	if n > 64<<20 {
		t.Errorf("OpenReadOnly and Verify (%v) allocated %d bytes for a %d-byte index file", verr, n, huge)
	}
	if verr != nil || len(rep.IndexProblems) == 0 || !strings.Contains(strings.Join(rep.IndexProblems, "\n"), filepath.Base(idx[0])) {
		t.Errorf("Verify: %v, index problems %q: want the index file named", verr, rep.IndexProblems)
	}
}

// A writer's open of a segment whose index file was grown huge (sparse)
// cuts it to what an index of the segment can hold: it neither allocates
// the file's size on disk nor maps it, and the log reads and appends.
func TestWritableOpenCutsAnOversizedIndexFile(t *testing.T) {
	const huge = 256 << 20
	opts := Options{SegmentBytes: 1 << 20}
	dir := t.TempDir()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 20, func(uint64) int { return 100 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pat := range []string{"*.index", "*.timeindex"} {
		files, _ := filepath.Glob(filepath.Join(dir, pat))
		if len(files) != 1 {
			t.Fatalf("%s: %v", pat, files)
		}
		if err := os.Truncate(files[0], huge); err != nil {
			t.Fatal(err)
		}
		if err := openAndClose(dir, opts); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(files[0])
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() >= huge {
			t.Errorf("%s is still %d bytes after a writer's open", files[0], st.Size())
		}
		l, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := l.Read(19); err != nil || len(r.Body) != 100 {
			t.Errorf("Read(19) = %d bytes, %v", len(r.Body), err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
