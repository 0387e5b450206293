package raftstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
)

// raft-boltdb: TestBoltStore_Set_Get, _SetUint64_GetUint64; raft-wal:
// TestStable, TestStableRecovery. A missing key is an error whose text is
// exactly "not found" (raft's NewRaft compares it).
func TestStable(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, testOptions())
	if _, err := s.Get([]byte("bad")); err == nil || err.Error() != "not found" {
		t.Fatalf("Get of a missing key: %v, want \"not found\"", err)
	}
	if _, err := s.GetUint64([]byte("bad")); err == nil || err.Error() != "not found" {
		t.Fatalf("GetUint64 of a missing key: %v, want \"not found\"", err)
	}
	if err := s.Set([]byte("hello"), []byte("world")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("abc"), 123); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte{}, []byte("empty key")); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		if v, err := s.Get([]byte("hello")); err != nil || string(v) != "world" {
			t.Fatalf("Get(hello) = %q, %v", v, err)
		}
		if v, err := s.GetUint64([]byte("abc")); err != nil || v != 123 {
			t.Fatalf("GetUint64(abc) = %d, %v", v, err)
		}
		if v, err := s.Get([]byte("empty")); err != nil || len(v) != 0 {
			t.Fatalf("Get(empty) = %q, %v", v, err)
		}
		if v, err := s.Get(nil); err != nil || string(v) != "empty key" {
			t.Fatalf("Get(\"\") = %q, %v", v, err)
		}
		if _, err := s.GetUint64([]byte("hello")); err == nil {
			t.Fatal("GetUint64 of a 5-byte value succeeded")
		}
	}
	check(s)
	// What Get returns is a copy, and Set keeps a copy of what it is given.
	v, _ := s.Get([]byte("hello"))
	v[0] = 'X'
	val := []byte("value")
	if err := s.Set([]byte("k"), val); err != nil {
		t.Fatal(err)
	}
	val[0] = 'X'
	if v, _ := s.Get([]byte("k")); string(v) != "value" {
		t.Fatalf("Get(k) = %q after the caller changed its slice", v)
	}
	check(s)
	if err := s.SetUint64([]byte("abc"), 1<<63); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, testOptions())
	if err := s.SetUint64([]byte("abc"), 123); err != nil {
		t.Fatal(err)
	}
	check(s)
}

// raft's own NewRaft on a new store: it reads the term and vote through
// the "not found" text, and its values survive a restart of the store.
func TestStableWithRaftKeys(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, testOptions())
	ok, err := raft.HasExistingState(s, s, raft.NewInmemSnapshotStore())
	if err != nil || ok {
		t.Fatalf("HasExistingState on a new store = %v, %v", ok, err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, testOptions())
	ok, err = raft.HasExistingState(s, s, raft.NewInmemSnapshotStore())
	if err != nil || !ok {
		t.Fatalf("HasExistingState after a term was stored = %v, %v", ok, err)
	}
}

// The store's own files, damaged one way at a time. raft.stable is never
// trusted when damaged: Open fails and says why (losing raft's term or
// vote could let a node vote twice). raft.bounds is only a lower bound of
// what is kept: when damaged, Open goes on with the log's own bounds.
func TestFileDamage(t *testing.T) {
	cases := []struct {
		name     string
		file     string
		corrupt  func([]byte) []byte
		openFail bool
	}{
		{"stable: empty", stableName, func(b []byte) []byte { return nil }, true},
		{"stable: cut short", stableName, func(b []byte) []byte { return b[:len(b)-1] }, true},
		{"stable: bit flip", stableName, func(b []byte) []byte { b[7] ^= 1; return b }, true},
		{"stable: version", stableName, func(b []byte) []byte { b[0] = 9; return b }, true},
		{"stable: pair count too large (checksum fixed)", stableName, func(b []byte) []byte {
			b = b[:len(b)-4]
			b[4]++
			return sealed(b)
		}, true},
		{"stable: trailing bytes (checksum fixed)", stableName, func(b []byte) []byte { return sealed(append(b[:len(b)-4], 0)) }, true},
		{"stable: key length 2^32-1 (checksum fixed)", stableName, func(b []byte) []byte {
			b = b[:len(b)-4]
			copy(b[5:], []byte{0xff, 0xff, 0xff, 0xff})
			return sealed(b)
		}, true},
		{"bounds: empty", boundsName, func(b []byte) []byte { return nil }, false},
		{"bounds: bit flip", boundsName, func(b []byte) []byte { b[3] ^= 0x10; return b }, false},
		{"bounds: version byte damaged", boundsName, func(b []byte) []byte { b[0] = 2; return b }, false},
		// A newer version's file (its checksum checks out) is never
		// overwritten: the open fails.
		{"bounds: newer version", boundsName, func(b []byte) []byte { b[0] = 2; return sealed(b[:len(b)-4]) }, true},
		{"bounds: too long", boundsName, func(b []byte) []byte { return append(b, 0) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, testOptions())
			mustStore(t, s, makeLogs(1, 100))
			if err := s.SetUint64([]byte("CurrentTerm"), 5); err != nil {
				t.Fatal(err)
			}
			if err := s.Set([]byte("LastVoteCand"), []byte("node-1")); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteRange(1, 10); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tc.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.corrupt(bytes.Clone(b)), 0o600); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(dir, testOptions())
			if tc.openFail {
				if !errors.Is(err, ErrBadFile) {
					t.Fatalf("Open with a damaged %s: %v, want ErrBadFile", tc.file, err)
				}
				// Nothing was changed: restoring the file restores the store.
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				s2 = openTest(t, dir, testOptions())
				checkContents(t, s2, 11, 100)
				return
			}
			if err != nil {
				t.Fatalf("Open with a damaged %s: %v", tc.file, err)
			}
			defer s2.Close()
			if notes := strings.Join(s2.Recovery().Notes, "; "); !strings.Contains(notes, boundsName) {
				t.Fatalf("the damaged %s is not reported: %q", tc.file, notes)
			}
			// The entries below 11 that the first segment still holds may
			// be served again (they were committed: raft deletes a prefix
			// only after a snapshot covers it), every other one is intact.
			first, _ := span(t, s2)
			if first > 11 {
				t.Fatalf("first entry %d: entries that were never deleted are gone", first)
			}
			checkContents(t, s2, first, 100)
			if v, err := s2.GetUint64([]byte("CurrentTerm")); err != nil || v != 5 {
				t.Fatalf("CurrentTerm = %d, %v", v, err)
			}
		})
	}
}

// A second Open of a directory in use fails with ErrLocked; a read-only
// Open is refused; bad log options are refused before anything is created.
func TestOpenRefusals(t *testing.T) {
	dir := t.TempDir()
	openTest(t, dir, testOptions())
	if _, err := Open(dir, testOptions()); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	o := testOptions()
	o.Log.ReadOnly = true
	if _, err := Open(t.TempDir(), o); !errors.Is(err, engine.ErrBadOptions) {
		t.Fatalf("read-only Open: %v, want ErrBadOptions", err)
	}
	o = testOptions()
	o.Log.SegmentBytes = -1
	fresh := filepath.Join(t.TempDir(), "store")
	if _, err := Open(fresh, o); !errors.Is(err, engine.ErrBadOptions) {
		t.Fatalf("Open with SegmentBytes -1: %v, want ErrBadOptions", err)
	}
	mustNotExist(t, fresh)
}

// A crash in a suffix DeleteRange after raft.bounds recorded the cut: Open
// completes it. A crash in a reset after the old log was renamed: Open
// removes it and the store is empty.
func TestOpenFinishesInterruptedWork(t *testing.T) {
	t.Run("pending cut", func(t *testing.T) {
		dir := t.TempDir()
		s := openTest(t, dir, testOptions())
		mustStore(t, s, makeLogs(1, 200))
		if err := s.DeleteRange(1, 20); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, boundsName), bounds{first: 21, cut: 57}.encode(), 0o600); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, dir, testOptions())
		checkContents(t, s, 21, 56)
		if r, err := s.log.Load().Read(57); err == nil {
			r.Release()
			t.Fatal("entry 57 is still in the log")
		}
		if !strings.Contains(strings.Join(s.Recovery().Notes, ";"), "from 57") {
			t.Fatalf("notes %q do not report the cut", s.Recovery().Notes)
		}
		b, _ := os.ReadFile(filepath.Join(dir, boundsName))
		if got, err := decodeBounds(b); err != nil || got != (bounds{first: 21, cut: noCut}) {
			t.Fatalf("raft.bounds after Open: %+v, %v", got, err)
		}
		mustStore(t, s, makeLogs(57, 3))
		checkContents(t, s, 21, 59)
	})
	t.Run("reset after the rename", func(t *testing.T) {
		dir := t.TempDir()
		s := openTest(t, dir, testOptions())
		mustStore(t, s, makeLogs(1, 200))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, logDir), filepath.Join(dir, resetDir)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, boundsName), bounds{first: 201, cut: noCut}.encode(), 0o600); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, dir, testOptions())
		checkContents(t, s, 0, 0)
		mustNotExist(t, filepath.Join(dir, resetDir))
		mustStore(t, s, makeLogs(5, 2))
		checkContents(t, s, 5, 6)
	})
}

// Readers never see a torn or foreign entry while a writer appends,
// truncates its tail and compacts its head (raft-wal:
// TestConcurrentReadersAndWriter, shortened), and Close may race them all.
func TestConcurrentReadersAndWriter(t *testing.T) {
	s := newTest(t)
	mustStore(t, s, makeLogs(1000, 1))
	stop := make(chan struct{})
	errs := make(chan error, 8)
	go func() { // appender, with a tail truncation now and then
		idx := uint64(1001)
		deadline := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(deadline) {
			if err := s.StoreLogs(makeLogs(idx, 2)); err != nil {
				errs <- err
				return
			}
			idx += 2
			if idx%97 == 0 {
				if err := s.DeleteRange(idx-1, idx-1); err != nil {
					errs <- err
					return
				}
				if _, last := span(t, s); last != idx-2 {
					errs <- errors.New("tail truncation did not take")
					return
				}
				idx--
			}
		}
		close(stop)
		errs <- nil
	}()
	go func() { // compactor: keeps the last 100 entries
		for {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			_, last := span(t, s)
			if last > 1100 {
				if err := s.DeleteRange(0, last-100); err != nil {
					errs <- err
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	reader := func() {
		var e raft.Log
		good := 0
		for {
			select {
			case <-stop:
				if good == 0 {
					errs <- errors.New("no read succeeded")
				} else {
					errs <- nil
				}
				return
			default:
			}
			first, last := span(t, s)
			for _, idx := range []uint64{first, first + (last-first)/2, last} {
				err := s.GetLog(idx, &e)
				if err == raft.ErrLogNotFound {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if e.Index != idx || !bytes.Equal(e.Data, entryData(idx)) {
					errs <- errors.New("wrong entry served: " + string(e.Data))
					return
				}
				good++
			}
		}
	}
	go reader()
	go reader()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Close racing every call: each either completes or returns ErrClosed.
func TestCloseRacingCalls(t *testing.T) {
	for round := range 20 {
		s := newTest(t)
		mustStore(t, s, makeLogs(1, 50))
		done := make(chan error, 5)
		ok := func(err error) error {
			if err == nil || errors.Is(err, ErrClosed) || err == raft.ErrLogNotFound {
				return nil
			}
			return err
		}
		go func() {
			for i := uint64(51); ; i++ {
				if err := s.StoreLogs(makeLogs(i, 1)); err != nil {
					done <- ok(err)
					return
				}
			}
		}()
		go func() {
			var e raft.Log
			for {
				if err := s.GetLog(50, &e); err != nil {
					done <- ok(err)
					return
				}
			}
		}()
		go func() {
			for {
				if err := s.SetUint64([]byte("t"), 1); err != nil {
					done <- ok(err)
					return
				}
			}
		}()
		go func() {
			for {
				if err := s.DeleteRange(0, 10); err != nil {
					done <- ok(err)
					return
				}
				if _, err := s.FirstIndex(); err != nil {
					done <- ok(err)
					return
				}
			}
		}()
		go func() { done <- s.Close() }()
		for range 5 {
			if err := <-done; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
