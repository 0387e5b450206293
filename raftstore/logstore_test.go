package raftstore

// The LogStore cases that hashicorp/raft-boltdb (v2/bolt_store_test.go) and
// hashicorp/raft-wal (wal_test.go, integration/integration_test.go) test
// themselves with, ported to a Store; the segment layouts of raft-wal's
// stubbed storage ("firstIndex(1000), segFull(), segTail(10)") become real
// entries in small segments, and every case also reopens the store.

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

func TestImplements(t *testing.T) {
	var s any = newTest(t)
	for name, ok := range map[string]bool{
		"raft.LogStore":          func() bool { _, ok := s.(raft.LogStore); return ok }(),
		"raft.StableStore":       func() bool { _, ok := s.(raft.StableStore); return ok }(),
		"raft.MonotonicLogStore": func() bool { m, ok := s.(raft.MonotonicLogStore); return ok && m.IsMonotonic() }(),
	} {
		if !ok {
			t.Errorf("*Store does not implement %s", name)
		}
	}
}

// raft-boltdb: TestBoltStore_FirstIndex, _LastIndex.
func TestFirstLastIndex(t *testing.T) {
	s := newTest(t)
	if f, l := span(t, s); f != 0 || l != 0 {
		t.Fatalf("empty store: [%d, %d], want [0, 0]", f, l)
	}
	mustStore(t, s, makeLogs(1, 3))
	if f, l := span(t, s); f != 1 || l != 3 {
		t.Fatalf("[%d, %d], want [1, 3]", f, l)
	}
}

// raft-boltdb: TestBoltStore_GetLog, _SetLog, _SetLogs: what GetLog returns
// is deeply equal to what was stored (zero AppendedAt, nil Extensions).
func TestGetLogDeepEqual(t *testing.T) {
	s := newTest(t)
	var e raft.Log
	if err := s.GetLog(1, &e); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog on an empty store: %v, want raft.ErrLogNotFound", err)
	}
	logs := []*raft.Log{
		{Index: 1, Data: []byte("log1")},
		{Index: 2, Data: []byte("log2")},
		{Index: 3, Data: []byte("log3")},
	}
	mustStore(t, s, logs[:1])
	mustStore(t, s, logs[1:])
	for _, want := range logs {
		got := new(raft.Log)
		if err := s.GetLog(want.Index, got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("GetLog(%d) = %#v, want %#v", want.Index, got, want)
		}
	}
}

// raft-boltdb: TestBoltStore_DeleteRange.
func TestDeleteRangeFront(t *testing.T) {
	s := newTest(t)
	mustStore(t, s, makeLogs(1, 3))
	if err := s.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	for _, idx := range []uint64{1, 2} {
		if err := s.GetLog(idx, new(raft.Log)); err != raft.ErrLogNotFound {
			t.Fatalf("GetLog(%d) after DeleteRange(1, 2): %v", idx, err)
		}
	}
	checkContents(t, s, 3, 3)
}

// raft-wal: TestWALOpen (the cases that do not stub the storage): an empty
// directory is an empty store; entries over several segments are all read
// back after a reopen; appending after the reopen works.
func TestOpenRecovers(t *testing.T) {
	for _, n := range []int{0, 10, 210} {
		dir := t.TempDir()
		s := openTest(t, dir, testOptions())
		if n > 0 {
			mustStore(t, s, makeLogs(1, n))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, dir, testOptions())
		first := uint64(1)
		if n == 0 {
			first = 0
		}
		checkContents(t, s, first, uint64(n))
		mustStore(t, s, makeLogs(uint64(n)+1, 1))
		checkContents(t, s, 1, uint64(n)+1)
	}
}

// raft-wal: TestStoreLogs.
func TestStoreLogsCases(t *testing.T) {
	cases := []struct {
		name        string
		existing    int // entries 1..existing stored first
		store       []*raft.Log
		store2      []*raft.Log
		wantErr     error
		first, last uint64
		firstBase   uint64 // base offset of the first segment, when checked
	}{
		{name: "empty log append", store: makeLogs(1, 5), first: 1, last: 5},
		{name: "empty log append, start from non-zero", store: makeLogs(10000, 5), first: 10000, last: 10004, firstBase: 10000},
		{name: "existing segment log append", existing: 10, store: makeLogs(11, 5), first: 1, last: 15},
		{name: "existing multi segment log append", existing: 210, store: makeLogs(211, 5), first: 1, last: 215},
		{name: "out of order", existing: 10, store: makeLogs(100, 5), wantErr: ErrNotContiguous},
		{name: "overwrite", existing: 10, store: makeLogs(5, 5), wantErr: ErrNotContiguous},
		{name: "out of sequence", existing: 10, store: makeLogsAt(11, 12, 14, 15), wantErr: ErrNotContiguous},
		{name: "rotate when full", existing: 99, store: makeLogs(100, 5), first: 1, last: 104},
		{name: "rotate and append more", existing: 99, store: makeLogs(100, 5), store2: makeLogs(105, 5), first: 1, last: 109},
		{name: "empty rotate and append more", store: makeLogs(100, 101), store2: makeLogs(201, 5), first: 100, last: 205, firstBase: 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, testOptions())
			if tc.existing > 0 {
				mustStore(t, s, makeLogs(1, tc.existing))
			}
			err := s.StoreLogs(tc.store)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("StoreLogs: %v, want %v", err, tc.wantErr)
				}
				// Nothing was written.
				checkContents(t, s, 1, uint64(tc.existing))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.store2 != nil {
				mustStore(t, s, tc.store2)
			}
			checkContents(t, s, tc.first, tc.last)
			if tc.firstBase != 0 {
				if b := segmentBases(t, dir); len(b) == 0 || b[0] != tc.firstBase {
					t.Fatalf("segments %v: the first should start at %d", b, tc.firstBase)
				}
				mustNotExist(t, dir+"/"+resetDir)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkContents(t, openTest(t, dir, testOptions()), tc.first, tc.last)
		})
	}
}

// raft-wal: TestDeleteRange. The log holds [1000, 1109] over many segments.
func TestDeleteRangeCases(t *testing.T) {
	const first, last = 1000, 1109
	cases := []struct {
		name           string
		min, max       uint64
		wantErr        error
		wantFirst      uint64
		wantLast       uint64
		dropsSegments  bool
		removesEntries bool // physically, through Truncate
	}{
		{name: "no-op empty range", min: 1000, max: 999, wantFirst: first, wantLast: last},
		{name: "no-op truncate from head", min: 0, max: 100, wantFirst: first, wantLast: last},
		{name: "no-op truncate from after tail", min: 5000, max: 5100, wantFirst: first, wantLast: last},
		{name: "error: truncate from middle", min: 1010, max: 1020, wantErr: ErrMiddleRange},
		{name: "in-segment head truncation", min: 0, max: 1010, wantFirst: 1011, wantLast: last},
		{name: "segment deleting head truncation", min: 1000, max: 1101, wantFirst: 1102, wantLast: last, dropsSegments: true},
		{name: "head truncation deleting all segments", min: 1000, max: last},
		{name: "non-deleting tail-truncation", min: last - 1, max: last, wantFirst: first, wantLast: last - 2, removesEntries: true},
		{name: "tail-deleting tail-truncation", min: 1051, max: last, wantFirst: first, wantLast: 1050, removesEntries: true},
		{name: "tail truncation beyond the tail", min: 1051, max: 1 << 40, wantFirst: first, wantLast: 1050, removesEntries: true},
		{name: "everything deleting truncation", min: 1, max: last},
		{name: "everything, up to the largest index", min: 0, max: 1<<64 - 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, testOptions())
			mustStore(t, s, makeLogs(first, 100))
			mustStore(t, s, makeLogs(first+100, 10))
			segsBefore := segmentBases(t, dir)
			err := s.DeleteRange(tc.min, tc.max)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("DeleteRange: %v, want %v", err, tc.wantErr)
				}
				checkContents(t, s, first, last)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkContents(t, s, tc.wantFirst, tc.wantLast)
			segsAfter := segmentBases(t, dir)
			if tc.dropsSegments && len(segsAfter) >= len(segsBefore) {
				t.Fatalf("segments %v before, %v after: none dropped", segsBefore, segsAfter)
			}
			if tc.removesEntries {
				if r, err := s.log.Load().Read(tc.wantLast + 1); err == nil {
					r.Release()
					t.Fatalf("entry %d is still in the log", tc.wantLast+1)
				}
			}
			// Appending goes on at the next index (1 when nothing is left, as
			// in raft-wal's test), and everything holds after a reopen.
			next := tc.wantLast + 1
			wantFirst := tc.wantFirst
			if tc.wantLast == 0 {
				wantFirst = 1
			}
			mustStore(t, s, makeLogsAt(next))
			checkContents(t, s, wantFirst, next)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkContents(t, openTest(t, dir, testOptions()), wantFirst, next)
		})
	}
}

// raft-wal: TestClose; and Close racing calls.
func TestClose(t *testing.T) {
	s := newTest(t)
	mustStore(t, s, makeLogs(1, 300))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check := func(name string, err error) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	_, err := s.FirstIndex()
	check("FirstIndex", err)
	_, err = s.LastIndex()
	check("LastIndex", err)
	check("GetLog", s.GetLog(1, new(raft.Log)))
	check("StoreLog", s.StoreLog(makeLogs(301, 1)[0]))
	check("StoreLogs", s.StoreLogs(makeLogs(301, 2)))
	check("DeleteRange", s.DeleteRange(1, 2))
	_, err = s.Get([]byte("foo"))
	check("Get", err)
	_, err = s.GetUint64([]byte("foo"))
	check("GetUint64", err)
	check("Set", s.Set([]byte("foo"), []byte("foo")))
	check("SetUint64", s.SetUint64([]byte("foo"), 1))
	check("Close", s.Close())
}

// raft-wal integration: TestIntegrationScenarios, each checked, closed,
// reopened and checked again.
func TestIntegrationScenarios(t *testing.T) {
	type step func(t *testing.T, s *Store)
	appendBatches := func(batches, per int) step {
		return func(t *testing.T, s *Store) {
			_, last := span(t, s)
			for b := range batches {
				mustStore(t, s, makeLogs(last+1+uint64(b*per), per))
			}
		}
	}
	appendAt := func(idx uint64) step {
		return func(t *testing.T, s *Store) { mustStore(t, s, makeLogs(idx, 1)) }
	}
	deleteRange := func(min, max uint64) step {
		return func(t *testing.T, s *Store) {
			if err := s.DeleteRange(min, max); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name        string
		steps       []step
		first, last uint64
	}{
		{"basic creation, appends, rotation", []step{appendBatches(5, 4)}, 1, 20},
		{"starting at high index, appends, rotation", []step{appendAt(1_000_000), appendBatches(5, 4)}, 1_000_000, 1_000_020},
		{"head truncation deleting no files", []step{appendBatches(11, 4), deleteRange(1, 2)}, 3, 44},
		{"head truncation deleting multiple files", []step{appendBatches(40, 4), deleteRange(1, 120)}, 121, 160},
		{"tail truncation in active segment", []step{appendBatches(11, 4), deleteRange(44, 44)}, 1, 43},
		{"tail truncation in active segment and write more", []step{appendBatches(11, 4), deleteRange(44, 44), appendBatches(1, 4)}, 1, 47},
		{"tail truncation deleting files", []step{appendBatches(40, 4), deleteRange(20, 160)}, 1, 19},
		{"tail truncation deleting files and write more", []step{appendBatches(40, 4), deleteRange(20, 160), appendBatches(1, 4)}, 1, 23},
		{"write some logs, truncate everything, restart logs from different index", []step{appendBatches(11, 4), deleteRange(1, 44), appendAt(1000), appendBatches(1, 4)}, 1000, 1004},
		{"truncate everything, restart logs from a lower index", []step{appendBatches(40, 4), deleteRange(1, 160), appendAt(7), appendBatches(1, 4)}, 7, 11},
		{"truncate everything, go on at the next index", []step{appendBatches(11, 4), deleteRange(1, 44), appendAt(45), appendBatches(1, 4)}, 45, 49},
		{"truncate past the end, restart after it", []step{appendBatches(11, 4), deleteRange(1, 1000), appendAt(1001)}, 1001, 1001},
		{"truncate past the end, go on at the next index", []step{appendBatches(11, 4), deleteRange(1, 1000), appendAt(45)}, 45, 45},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, testOptions())
			for _, st := range tc.steps {
				st(t, s)
			}
			checkContents(t, s, tc.first, tc.last)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, dir, testOptions())
			checkContents(t, s, tc.first, tc.last)
			mustNotExist(t, dir+"/"+resetDir)
		})
	}
}
