package segment

import (
	"path/filepath"
	"testing"
)

// A segment a roll activated keeps its index files under the prepared
// names until NameIndexes, which runs beside the appends, and the preparer
// makes the next prepared files under the same names right after. A
// VerifyIndex that chose the prepared name of a file, then opened it after
// the naming and the next Prepare, read the new segment's empty file and
// reported the two files as disagreeing. It must read both files under
// the names they have once named, and find nothing wrong.
func TestVerifyIndexBesideNamingOfIndexFiles(t *testing.T) {
	cfg := testConfig(t, 8192, 64)
	s, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const base = 100
	if err := s.Activate(base); err != nil {
		t.Fatal(err)
	}
	for id := uint64(base); id < base+20; id++ {
		if _, _, err := s.Append(nil, body(id, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.idx.Load().entries(); n < 2 {
		t.Fatalf("%d index entries: the test needs some", n)
	}
	prepared := filepath.Join(cfg.Dir, PreparedPrefix+IndexSuffix)
	var next *Segment
	s.beforeIndexRead = func(path string) {
		if path != prepared || next != nil {
			return
		}
		// The roll's goroutine names the index files, and the preparer
		// makes the next segment's files under the prepared names.
		if err := s.NameIndexes(); err != nil {
			t.Fatal(err)
		}
		if next, err = Prepare(cfg); err != nil {
			t.Fatal(err)
		}
	}
	probs := s.VerifyIndex()
	if next == nil {
		t.Fatal("VerifyIndex never read the offset index under its prepared name: the test tested nothing")
	}
	next.Close()
	next.RemoveFiles()
	if len(probs) > 0 {
		t.Fatalf("VerifyIndex beside the naming of the index files: %q", probs)
	}
	s.beforeIndexRead = nil
	if probs := s.VerifyIndex(); len(probs) > 0 {
		t.Fatalf("VerifyIndex after the naming: %q", probs)
	}
}
