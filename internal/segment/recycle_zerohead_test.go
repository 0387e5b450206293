//go:build linux

package segment

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pagelog/pagelog/mmapfile"
	"golang.org/x/sys/unix"
)

// pageState returns how many pages of f in [off, off+n) are in the page
// cache dirty, and how many are under writeback (cachestat(2)); the test
// is skipped where the kernel has no cachestat.
func pageState(t *testing.T, f *os.File, off, n int64) (dirty, writeback uint64) {
	t.Helper()
	var st unix.Cachestat_t
	r := unix.CachestatRange{Off: uint64(off), Len: uint64(n)}
	if err := unix.Cachestat(uint(f.Fd()), &r, &st, 0); err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			t.Skipf("no cachestat here: %v", err)
		}
		t.Fatal(err)
	}
	return st.Dirty, st.Writeback
}

// dirtyFile writes size bytes of a pattern to a new file at path through
// write(2), leaving them dirty in the page cache, and returns them.
func dirtyFile(t *testing.T, path string, size int64) []byte {
	t.Helper()
	b := pattern(size)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func pattern(size int64) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i>>12 + 1)
	}
	return b
}

// dirtyMapped writes size bytes of a pattern to a new file at path through
// a shared mapping, as a segment's records are written, leaving them dirty
// in the page cache, and returns them.
func dirtyMapped(t *testing.T, path string, size int64) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	b := pattern(size)
	copy(m, b)
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	return b
}

// zeroHead's claim: the first page of the file is written back (not dirty
// and not under writeback when it returns), and nothing else of the file
// is: the dropped segment's dirty pages after the first, written through a
// mapping as records are, stay dirty. An fdatasync of a file like it, the
// control, leaves none dirty: the check tells the two apart. The bytes
// after the first page are not changed. (A file written with write(2)
// instead is cached in large folios on ext4 here: writing its first page
// back writes back the whole first folio, 2 MiB, and no more.)
func TestZeroHeadWritesBackTheFirstPageOnly(t *testing.T) {
	const size = 8 << 20
	page := int64(mmapfile.PageSize)
	dir := t.TempDir()
	open := func(p string) *os.File {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}

	control := filepath.Join(dir, "control")
	dirtyFile(t, control, size)
	cf := open(control)
	if d, _ := pageState(t, cf, 0, size); d < size/uint64(page)/2 {
		t.Skipf("only %d of %d pages written read as dirty: this file system shows no dirty pages to count", d, size/page)
	}
	if err := mmapfile.Datasync(cf); err != nil {
		t.Fatal(err)
	}
	if d, w := pageState(t, cf, 0, size); d != 0 || w != 0 {
		t.Fatalf("control: %d dirty and %d under writeback after fdatasync", d, w)
	}

	path := filepath.Join(dir, "reused")
	want := dirtyMapped(t, path, size)
	f := open(path)
	before, _ := pageState(t, f, page, size-page)
	if d, _ := pageState(t, f, 0, page); d != 1 {
		t.Fatalf("the first page is not dirty before zeroHead (%d)", d)
	}
	// No Datasync hook: what runs in production.
	if err := zeroHead(&Config{}, path, size); err != nil {
		t.Fatal(err)
	}
	if d, w := pageState(t, f, 0, page); d != 0 || w != 0 {
		t.Fatalf("after zeroHead the first page is dirty (%d) or under writeback (%d): not on disk when it returned", d, w)
	}
	after, _ := pageState(t, f, page, size-page)
	// The kernel's flusher may write some back meanwhile, never all of
	// them in the microseconds this takes unless something synced them.
	if after < before/2 {
		t.Fatalf("zeroHead wrote back the rest of the file: %d dirty pages after the first before, %d after", before, after)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != size {
		t.Fatalf("zeroHead changed the size to %d", len(got))
	}
	if !bytes.Equal(got[:page], make([]byte, page)) {
		t.Fatal("the first page is not zero")
	}
	if !bytes.Equal(got[page:], want[page:]) {
		t.Fatal("zeroHead changed bytes after the first page")
	}
	t.Logf("dirty pages after the first: %d before zeroHead, %d after", before, after)
}

// Files of a page and less, and just over one: the first min(size, page)
// bytes become zero, the size never changes (a file of less than a page is
// not grown to one), and the byte after the first page is left alone.
func TestZeroHeadSmallFiles(t *testing.T) {
	page := int64(mmapfile.PageSize)
	dir := t.TempDir()
	for _, size := range []int64{1, 100, page - 1, page, page + 1, 3*page + 17} {
		path := filepath.Join(dir, "f")
		want := dirtyFile(t, path, size)
		if err := zeroHead(&Config{}, path, size); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(got)) != size {
			t.Fatalf("size %d: zeroHead left %d bytes", size, len(got))
		}
		n := min(size, page)
		if !bytes.Equal(got[:n], make([]byte, n)) || !bytes.Equal(got[n:], want[n:]) {
			t.Fatalf("size %d: not the first %d bytes zero and the rest as they were", size, n)
		}
	}
	// A file that is gone is an error, and nothing is created.
	gone := filepath.Join(dir, "gone")
	if err := zeroHead(&Config{}, gone, page); err == nil {
		t.Fatal("zeroHead of a missing file succeeded")
	}
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("zeroHead of a missing file created it: %v", err)
	}
}

// PrepareRecycled: the descriptor Config.Datasync is told of is the
// prepared .log, opened O_DSYNC, whose first page reads zero already; a
// Datasync error fails PrepareRecycled with that error and leaves no file
// at all (neither the kept one nor a prepared one), and a later Prepare
// works. Without the error the segment takes records at its base as a
// new one does, and the old records never read back.
func TestZeroHeadPrepareRecycled(t *testing.T) {
	const segBytes = 256 << 10
	cfg := testConfig(t, segBytes, 4096)
	page := mmapfile.PageSize

	// A dropped segment's file: a sealed segment full of records.
	old, err := Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, old)
	if err := old.Seal(false); err != nil {
		t.Fatal(err)
	}
	oldPath := old.Path()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(cfg.Dir, "recycled-"+filepath.Base(oldPath))
	keep := func(from string) {
		t.Helper()
		for _, suffix := range []string{IndexSuffix, TimeIndexSuffix} {
			_ = os.Remove(filepath.Join(cfg.Dir, Name(0, suffix)))
		}
		if err := os.Rename(from, kept); err != nil {
			t.Fatal(err)
		}
	}
	keep(oldPath)

	boom := errors.New("injected datasync failure")
	var mu sync.Mutex
	var flags []int
	var heads [][]byte
	fail := true
	cfg.Datasync = func(f *os.File) error {
		if filepath.Base(f.Name()) != PreparedPrefix+LogSuffix {
			return mmapfile.Datasync(f)
		}
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			return err
		}
		head := make([]byte, page)
		if _, err := f.ReadAt(head, 0); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		flags = append(flags, fl)
		heads = append(heads, head)
		if fail {
			return boom
		}
		return nil
	}
	if s, err := PrepareRecycled(cfg, kept); !errors.Is(err, boom) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("PrepareRecycled with a failing Datasync: %v, want the injected error", err)
	}
	if len(flags) != 1 || flags[0]&unix.O_DSYNC != unix.O_DSYNC {
		t.Fatalf("Datasync told %d times, flags %#x: want once, with O_DSYNC", len(flags), flags)
	}
	if !bytes.Equal(heads[0], make([]byte, page)) {
		t.Fatal("the first page did not read zero when Datasync was told")
	}
	if ents, _ := os.ReadDir(cfg.Dir); len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("a failed PrepareRecycled left %v", names)
	}

	// Again, from a file of another dropped segment, without the error.
	mu.Lock()
	fail = false
	mu.Unlock()
	old, err = Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, old)
	if err := old.Seal(false); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	keep(oldPath)
	st, err := os.Stat(kept)
	if err != nil {
		t.Fatal(err)
	}
	s, err := PrepareRecycled(cfg, kept)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(kept); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the kept file is still there after PrepareRecycled: %v", err)
	}
	if len(flags) != 2 || flags[1]&unix.O_DSYNC != unix.O_DSYNC || !bytes.Equal(heads[1], make([]byte, page)) {
		t.Fatalf("second PrepareRecycled: Datasync told %d times, flags %#x", len(flags), flags)
	}
	const base = 1 << 20
	if err := s.Activate(base); err != nil {
		t.Fatal(err)
	}
	if s.Next() != base || s.End() != 0 {
		t.Fatalf("reused segment: next %d end %d, want %d and 0", s.Next(), s.End(), base)
	}
	w := fill(t, s)
	checkReads(t, s, w)
	if err := s.Seal(false); err != nil {
		t.Fatal(err)
	}
	checkReads(t, s, w)
	if fi, err := os.Stat(s.Path()); err != nil || fi.Size() < st.Size() {
		t.Fatalf("the reused file was %d bytes, %v after its seal (%v): it must never become shorter", st.Size(), fi, err)
	}
}
