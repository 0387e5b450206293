package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
)

// testOptions: small segments, so that a few hundred entries span many.
func testOptions() Options {
	return Options{Log: engine.Options{SegmentBytes: 2048, IndexIntervalBytes: 256, MaxRecordBytes: 4096}}
}

func openTest(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newTest(t testing.TB) *Store {
	t.Helper()
	return openTest(t, t.TempDir(), testOptions())
}

// entryData is the data of the test entry at idx (raft-wal's tests use the
// same text).
func entryData(idx uint64) []byte { return []byte(fmt.Sprintf("Log entry %d", idx)) }

// makeLogs returns n entries from start, with entryData.
func makeLogs(start uint64, n int) []*raft.Log {
	out := make([]*raft.Log, n)
	for i := range out {
		idx := start + uint64(i)
		out[i] = &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: entryData(idx)}
	}
	return out
}

func makeLogsAt(idxs ...uint64) []*raft.Log {
	out := make([]*raft.Log, len(idxs))
	for i, idx := range idxs {
		out[i] = &raft.Log{Index: idx, Term: 1, Data: entryData(idx)}
	}
	return out
}

func mustStore(t testing.TB, s *Store, logs []*raft.Log) {
	t.Helper()
	if err := s.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs(%d entries from %d): %v", len(logs), logs[0].Index, err)
	}
}

// bounds returns FirstIndex and LastIndex.
func span(t testing.TB, s *Store) (uint64, uint64) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	return first, last
}

// checkContents asserts that the store holds exactly [first, last], each
// entry with entryData, and nothing just outside.
func checkContents(t testing.TB, s *Store, first, last uint64) {
	t.Helper()
	f, l := span(t, s)
	if f != first || l != last {
		t.Fatalf("store holds [%d, %d], want [%d, %d]", f, l, first, last)
	}
	var e raft.Log
	if last > 0 {
		for idx := first; idx <= last; idx++ {
			if err := s.GetLog(idx, &e); err != nil {
				t.Fatalf("GetLog(%d): %v", idx, err)
			}
			if e.Index != idx || string(e.Data) != string(entryData(idx)) {
				t.Fatalf("GetLog(%d) = index %d, data %q", idx, e.Index, e.Data)
			}
		}
	}
	if first > 0 {
		if err := s.GetLog(first-1, &e); err != raft.ErrLogNotFound {
			t.Fatalf("GetLog(%d) below the first entry: %v, want raft.ErrLogNotFound", first-1, err)
		}
	}
	if err := s.GetLog(last+1, &e); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog(%d) after the last entry: %v, want raft.ErrLogNotFound", last+1, err)
	}
}

// segmentBases lists the base offsets of the log's segment files.
func segmentBases(t testing.TB, dir string) []uint64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, logDir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, n := range names {
		var b uint64
		if _, err := fmt.Sscanf(filepath.Base(n), "%020d.log", &b); err == nil {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

func mustNotExist(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists (%v)", path, err)
	}
}
