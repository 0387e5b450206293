package engine

import (
	"os"
	"testing"

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

// punchFrom makes path a hole from off to its end (its size kept).
func punchFrom(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() <= off {
		t.Fatalf("%s: %d bytes, nothing past %d to punch", path, st.Size(), off)
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, st.Size()-off); err != nil {
		t.Fatal(err)
	}
}
