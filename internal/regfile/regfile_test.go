//go:build unix

package regfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// opened runs open in a goroutine and fails the test when it does not
// return in time: an open that blocks (on a FIFO) never returns.
func opened(t *testing.T, open func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- open() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the open blocked")
		return nil
	}
}

func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, is string
	}{{fifo, "a FIFO"}, {link, "a symbolic link"}, {sub, "a directory"}} {
		for _, flag := range []int{os.O_RDONLY, os.O_RDWR, os.O_WRONLY | os.O_CREATE, os.O_RDWR | os.O_CREATE | os.O_TRUNC} {
			err := opened(t, func() error {
				f, err := Open(c.path, flag, 0o600)
				if err == nil {
					f.Close()
				}
				return err
			})
			var te *TypeError
			if !errors.As(err, &te) || !errors.Is(err, ErrNotRegular) || te.Is != c.is || !strings.Contains(err.Error(), c.path) {
				t.Errorf("Open(%s, %#x) = %v, want a TypeError saying it is %s", c.path, flag, err, c.is)
			}
		}
	}
	if _, err := ReadFile(fifo); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFile of a FIFO = %v, want ErrNotRegular", err)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
		t.Fatalf("the file outside reads %q, %v: it was written through the link", b, err)
	}
	if _, err := OpenDir(link); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenDir of a symbolic link = %v, want ErrNotRegular", err)
	}
	if _, err := OpenDir(fifo); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenDir of a FIFO = %v, want ErrNotRegular", err)
	}
}

func TestOpenGivesABlockingRegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := Open(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("abc"); err != nil {
		t.Fatal(err)
	}
	if fl, err := fcntlFlags(f); err != nil || fl&syscall.O_NONBLOCK != 0 {
		t.Errorf("flags %#x, %v: O_NONBLOCK still set", fl, err)
	}
	if b, err := ReadFile(path); err != nil || string(b) != "abc" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	if _, err := Open(path, os.O_RDONLY, 0); err != nil {
		t.Error(err)
	}
	if _, err := Create(path, os.O_RDWR, 0o600); !errors.Is(err, os.ErrExist) {
		t.Errorf("Create of an existing file = %v, want ErrExist", err)
	}
}

func TestWriteNewRemovesALinkAtTheTemporaryName(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "x.tmp")
	if err := os.Symlink(outside, tmp); err != nil {
		t.Fatal(err)
	}
	if err := WriteNew(tmp, []byte("new"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Fatalf("the file outside reads %q: written through the link", b)
	}
	if st, err := os.Lstat(tmp); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("%s: %v, %v: want a regular file", tmp, st, err)
	}
}

func TestOpenInRefusesALinkedDirectory(t *testing.T) {
	dir := t.TempDir()
	real := t.TempDir()
	if err := os.Symlink(real, filepath.Join(dir, "cursors")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(filepath.Join(dir, "cursors")); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a symbolic link, not a directory") {
		t.Fatalf("OpenDir = %v", err)
	}
	d, err := OpenDir(real)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := OpenIn(d, "c", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Symlink("c", filepath.Join(real, "l")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenIn(d, "l", os.O_RDWR, 0); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), filepath.Join(real, "l")) {
		t.Fatalf("OpenIn of a link = %v", err)
	}
	if m, err := LstatIn(d, "l"); err != nil || Kind(m) != "a symbolic link" {
		t.Fatalf("LstatIn = %v, %v", m, err)
	}
}

func TestReadFileMaxRefusesALargerFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("abcd"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFileMax(path, 4); err != nil || string(b) != "abcd" {
		t.Fatalf("ReadFileMax(4) = %q, %v", b, err)
	}
	if err := os.Truncate(path, 1<<40); err != nil {
		t.Skip("no sparse files here:", err)
	}
	var se *SizeError
	if b, err := ReadFileMax(path, 4); !errors.As(err, &se) || !errors.Is(err, ErrTooLarge) || se.Size != 1<<40 || b != nil {
		t.Fatalf("ReadFileMax of a 1 TiB file = %d bytes, %v; want a SizeError", len(b), err)
	}
}
