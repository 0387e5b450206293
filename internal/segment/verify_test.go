package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/sparseidx"
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

// viewBesideWriter returns a writer's segment holding records with index
// entries, a view of it as a read-only log opens its newest segment, and
// the writer's index file names.
func viewBesideWriter(t *testing.T) (w, v *Segment) {
	t.Helper()
	cfg := testConfig(t, 8192, 64)
	w, err := Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	for id := range uint64(20) {
		if _, _, err := w.Append(nil, body(id, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.idx.Load().entries(); n < 2 {
		t.Fatalf("%d index entries: the test needs some", n)
	}
	v, _, err = OpenView(cfg, 0, noNext, Hint{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	if v.next.Load() != w.next.Load() {
		t.Fatalf("the view holds records up to %d, the writer %d", v.next.Load(), w.next.Load())
	}
	return w, v
}

// lastEntryBytes returns where the writer's last entry lies in the index
// file with the suffix given, and its bytes.
func lastEntryBytes(t *testing.T, w *Segment, suffix string) (int64, []byte) {
	t.Helper()
	width := sparseidx.OffsetEntrySize
	if suffix == TimeIndexSuffix {
		width = sparseidx.TimeEntrySize
	}
	b, err := os.ReadFile(w.path(suffix))
	if err != nil {
		t.Fatal(err)
	}
	at := (w.idx.Load().entries() - 1) * width
	return int64(at), bytes.Clone(b[at : at+width])
}

// writeFileAt writes b at off in the file at path.
func writeFileAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// A read-only view finds a segment's records by reading its .log, and the
// writer writes a record before the record's index entries: a view beside
// a writer can read the index files before the newest record's entry is
// in them, or read the offset index before the entry and the time index
// after it. Neither is damage. VerifyIndex of the view must read the
// files again and report only a problem that stays.
func TestVerifyIndexOfViewBesideEntriesBeingWritten(t *testing.T) {
	for _, c := range []struct {
		name string
		// stale says which files read without the entry, by read
		// (1: the offset index, 2: the time index, then again).
		stale func(read int, suffix string) bool
	}{
		{"entry written between the two files' reads", func(read int, suffix string) bool {
			return read == 1 && suffix == IndexSuffix
		}},
		{"entry written after both files were read", func(read int, _ string) bool {
			return read <= 2
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, v := viewBesideWriter(t)
			type written struct {
				at    int64
				entry []byte
			}
			last := map[string]written{}
			for _, suffix := range []string{IndexSuffix, TimeIndexSuffix} {
				at, entry := lastEntryBytes(t, w, suffix)
				last[suffix] = written{at, entry}
			}
			reads := 0
			v.beforeIndexRead = func(path string) {
				reads++
				for suffix, e := range last {
					entry := e.entry
					if c.stale(reads, suffix) {
						entry = make([]byte, len(entry))
					}
					writeFileAt(t, w.path(suffix), entry, e.at)
				}
			}
			if probs := v.VerifyIndex(); len(probs) > 0 {
				t.Fatalf("VerifyIndex of a view beside a writer adding an entry: %q", probs)
			}
			if reads <= 2 {
				t.Fatalf("the index files were read %d times: the test tested nothing", reads)
			}
		})
	}
}

// A view whose index files stay without an entry its records need is
// damaged, looked at again or not: VerifyIndex reports it.
func TestVerifyIndexOfViewReportsAnEntryThatStaysMissing(t *testing.T) {
	w, v := viewBesideWriter(t)
	at, entry := lastEntryBytes(t, w, IndexSuffix)
	writeFileAt(t, w.path(IndexSuffix), make([]byte, len(entry)), at)
	probs := v.VerifyIndex()
	if len(probs) == 0 || !strings.Contains(probs[0], Name(0, TimeIndexSuffix)) {
		t.Fatalf("VerifyIndex of a view missing an offset entry: %q, want the two files reported as disagreeing", probs)
	}
}
