package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHashDirSeesChangedAddedAndRemovedFiles: a fingerprint changes with a
// file's contents and mode, and DiffHashes names what was added, removed
// and changed; Skip and FilesOnly leave entries out, Tree walks below.
func TestHashDirSeesChangedAddedAndRemovedFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "one")
	write("b", "two")
	write("skipped", "x")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("sub/c", "three")
	o := HashOptions{FilesOnly: true, Skip: func(name string) bool { return name == "skipped" }}
	before := MustHashDir(t, dir, o)
	if len(before) != 2 || before["a"] == "" || before["b"] == "" {
		t.Fatalf("flat, files only, one skipped: %v", before)
	}
	write("a", "ONE")
	write("skipped", "y")
	if err := os.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	write("d", "")
	if d := DiffHashes(before, MustHashDir(t, dir, o)); d != "a changed, b removed, d added" {
		t.Fatalf("DiffHashes: %q", d)
	}
	if err := os.Chmod(filepath.Join(dir, "d"), 0o400); err != nil {
		t.Fatal(err)
	}
	tree := HashOptions{Tree: true, ModTimes: true}
	h := MustHashDir(t, dir, tree)
	for _, name := range []string{".", "a", "d", "skipped", "sub", "sub/c"} {
		if h[name] == "" {
			t.Errorf("tree: no %q in %v", name, h)
		}
	}
	digest := DirDigest(t, dir, tree)
	if DirDigest(t, dir, tree) != digest {
		t.Fatal("two digests of the same tree differ")
	}
	write("sub/c", "THREE")
	if DirDigest(t, dir, tree) == digest {
		t.Fatal("a file below changed, the digest did not")
	}
}
