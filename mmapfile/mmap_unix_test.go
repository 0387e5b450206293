//go:build unix

package mmapfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// OpenRead opens as os.Open does: read-only, close-on-exec, the same
// errors.
func TestOpenRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenRead(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 5)
	if n, err := f.ReadAt(b, 0); n != 5 || err != nil || string(b) != "hello" {
		t.Fatalf("ReadAt: %d %v %q", n, err, b)
	}
	if _, err := f.Write([]byte("x")); err == nil {
		t.Fatal("a write through a read-only descriptor succeeded")
	}
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("descriptor flags %#x, %v: want close-on-exec", flags, err)
	}
	if f.Name() != path {
		t.Fatalf("Name %q, want %q", f.Name(), path)
	}
	_, err = OpenRead(path + ".missing")
	var pe *os.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Op != "open" || pe.Path != path+".missing" {
		t.Fatalf("OpenRead of a missing file: %#v", err)
	}
}

// A mapping the address space has no room for is an error matching
// ErrAddressSpace, which names the file and the size: a 32-bit process
// meets it at a large segment, a 64-bit one here at 128 TiB.
func TestMapBeyondTheAddressSpaceIsErrAddressSpace(t *testing.T) {
	if strconv.IntSize == 32 {
		t.Skip("128 TiB is no int here; the engine's limits test covers 32-bit")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	shift := 47 // not a constant: an int of 32 bits (skipped above) has no room for it
	b, err := Map(f, 1<<shift, false)
	if err == nil {
		_ = Unmap(b)
		t.Skip("this system mapped 128 TiB")
	}
	if !errors.Is(err, ErrAddressSpace) || !strings.Contains(err.Error(), f.Name()) {
		t.Fatalf("Map of 128 TiB: %v; want an error matching ErrAddressSpace naming the file", err)
	}
}
