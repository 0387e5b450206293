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

// TestRetire: a retired mapping reads zeros where the file was, and the
// file itself is untouched.
func TestRetire(t *testing.T) {
	f := tempFile(t, 8192)
	rw, err := Map(f, 8192, true)
	if err != nil {
		t.Fatal(err)
	}
	copy(rw, "data")
	Unmap(rw)
	ro, err := Map(f, 8192, false)
	if err != nil {
		t.Fatal(err)
	}
	kept := ro[:4]
	if string(kept) != "data" {
		t.Fatal("mapping does not show the file")
	}
	if err := Retire(ro); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kept, make([]byte, 4)) {
		t.Fatalf("retired mapping reads %q, want zeros", kept)
	}
	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "data" {
		t.Fatalf("file after retire: %q %v", buf, err)
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

// TestRetiredRangesAreReused: a retired range is handed to the next
// MapRetirable of the same length, which then shows the new file there; a
// stale slice of the old mapping reads the new bytes, never faults. The
// number of address ranges held stays at its peak.
func TestRetiredRangesAreReused(t *testing.T) {
	const size = 64 << 10
	first := tempFile(t, size)
	if _, err := first.WriteAt([]byte("first"), 0); err != nil {
		t.Fatal(err)
	}
	a, err := MapRetirable(first, size)
	if err != nil {
		t.Fatal(err)
	}
	stale := a[:5]
	if err := Retire(a); err != nil {
		t.Fatal(err)
	}
	second := tempFile(t, size)
	if _, err := second.WriteAt([]byte("again"), 0); err != nil {
		t.Fatal(err)
	}
	b, err := MapRetirable(second, size)
	if err != nil {
		t.Fatal(err)
	}
	if &b[0] != &a[0] {
		t.Fatalf("retired range not reused: %p vs %p", &b[0], &a[0])
	}
	if string(b[:5]) != "again" || string(stale) != "again" {
		t.Fatalf("reused range reads %q, stale slice %q", b[:5], stale)
	}
	if err := Retire(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stale, make([]byte, 5)) {
		t.Fatalf("stale slice after the second retire: %q", stale)
	}
	// A plain unmap of a reused range works too.
	c, err := MapRetirable(second, size)
	if err != nil || &c[0] != &a[0] {
		t.Fatalf("third map: %v", err)
	}
	if err := Unmap(c); err != nil {
		t.Fatal(err)
	}
}
