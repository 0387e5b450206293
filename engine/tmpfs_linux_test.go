package engine

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

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
