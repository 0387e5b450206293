//go:build unix

package mmapfile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func tempFile(t *testing.T, size int64) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := Allocate(f, 0, size); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMapWriteRead: writes through a writable mapping are seen through a
// read-only one and by a plain read of the file; Populate and ZeroRange do
// what they say.
func TestMapWriteRead(t *testing.T) {
	const size = 1 << 20
	f := tempFile(t, size)
	if st, _ := f.Stat(); st.Size() != size {
		t.Fatalf("Allocate: size %d, want %d", st.Size(), size)
	}
	rw, err := Map(f, size, true)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(rw)
	ro, err := Map(f, size, false)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(ro)
	copy(rw[5000:], "hello")
	if err := Populate(rw, 0, size); err != nil {
		t.Fatal(err)
	}
	if string(ro[5000:5005]) != "hello" || !bytes.Equal(rw[:5000], make([]byte, 5000)) {
		t.Fatal("Populate changed bytes, or the read-only mapping does not see the write")
	}
	if err := SyncRange(rw, 5000, 5); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 5000); err != nil || string(buf) != "hello" {
		t.Fatalf("file read %q %v", buf, err)
	}
	if err := ZeroRange(f, 4096, 8192); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ro[4096:12288], make([]byte, 8192)) {
		t.Fatal("ZeroRange left bytes")
	}
	if err := Datasync(f); err != nil {
		t.Fatal(err)
	}
	if err := Advise(ro, 0, size, HugePage); err != nil {
		t.Logf("huge pages not supported here: %v", err)
	}
}

func TestMapEmptyAndBad(t *testing.T) {
	f := tempFile(t, 4096)
	if b, err := Map(f, 0, false); err != nil || b == nil || len(b) != 0 {
		t.Fatalf("Map(0) = %v, %v", b, err)
	}
	if _, err := Map(f, -1, false); err == nil {
		t.Fatal("Map(-1) succeeded")
	}
	if err := Unmap(nil); err != nil {
		t.Fatal(err)
	}
}
