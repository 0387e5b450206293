package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestEntryRoundTrip(t *testing.T) {
	now := time.Now()
	cases := []raft.Log{
		{},
		{Term: 1, Type: raft.LogCommand, Data: []byte("x")},
		{Term: math.MaxUint64, Type: raft.LogConfiguration, Extensions: []byte("ext"), Data: bytes.Repeat([]byte{7}, 5000)},
		{Term: 3, Type: raft.LogNoop, Extensions: []byte{0, 1, 2}},
		{Term: 4, Type: raft.LogType(255), AppendedAt: now},
		{Term: 5, AppendedAt: time.Unix(0, 0)},              // the epoch is not the zero time
		{Term: 6, AppendedAt: time.Unix(-1<<40, 999999999)}, // far before 1678 (UnixNano would overflow)
		{Term: 7, AppendedAt: time.Unix(1<<40, 1)},          // far after 2262
	}
	for i, e := range cases {
		e.Index = uint64(i) + 1
		b := make([]byte, entrySize(&e))
		if n := encodeEntry(b, &e); n != len(b) {
			t.Fatalf("case %d: encodeEntry wrote %d bytes of %d", i, n, len(b))
		}
		var got raft.Log
		if err := decodeEntry(e.Index, b, &got); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !got.AppendedAt.Equal(e.AppendedAt) || got.AppendedAt.IsZero() != e.AppendedAt.IsZero() {
			t.Fatalf("case %d: AppendedAt %v, want %v", i, got.AppendedAt, e.AppendedAt)
		}
		if e.AppendedAt.IsZero() && got.AppendedAt != (time.Time{}) {
			t.Fatalf("case %d: a zero AppendedAt came back as %#v", i, got.AppendedAt)
		}
		got.AppendedAt, e.AppendedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("case %d: got %+v, want %+v", i, got, e)
		}
		// Data and Extensions share one allocation: appending to one must
		// never write into the other.
		if len(got.Data) > 0 && len(got.Extensions) > 0 {
			ext := bytes.Clone(got.Extensions)
			_ = append(got.Data, 0xEE)
			if !bytes.Equal(got.Extensions, ext) {
				t.Fatalf("case %d: appending to Data changed Extensions", i)
			}
		}
		// A reused raft.Log loses what the previous entry left in it.
		stale := raft.Log{Data: []byte("stale"), Extensions: []byte("stale"), AppendedAt: now}
		if err := decodeEntry(e.Index, b, &stale); err != nil {
			t.Fatal(err)
		}
		stale.AppendedAt = time.Time{}
		if !reflect.DeepEqual(stale, e) {
			t.Fatalf("case %d: into a used raft.Log: %+v, want %+v", i, stale, e)
		}
	}
}

// Every way an entry header can be damaged gives ErrCorrupt, never a panic.
func TestEntryDamage(t *testing.T) {
	good := raft.Log{Index: 9, Term: 2, Extensions: []byte("ext"), Data: []byte("data")}
	enc := func() []byte {
		b := make([]byte, entrySize(&good))
		encodeEntry(b, &good)
		return b
	}
	cases := []struct {
		name    string
		corrupt func([]byte) []byte
	}{
		{"empty body", func(b []byte) []byte { return nil }},
		{"header cut short", func(b []byte) []byte { return b[:entryHeaderSize-1] }},
		{"version 0", func(b []byte) []byte { b[offVersion] = 0; return b }},
		{"version 2", func(b []byte) []byte { b[offVersion] = 2; return b }},
		{"nanoseconds of 1e9", func(b []byte) []byte { binary.BigEndian.PutUint32(b[offNsec:], 1e9); return b }},
		{"extensions past the end", func(b []byte) []byte { binary.BigEndian.PutUint32(b[offExtLen:], 8); return b }},
		{"extensions length 2^32-1", func(b []byte) []byte { binary.BigEndian.PutUint32(b[offExtLen:], math.MaxUint32); return b }},
	}
	for _, tc := range cases {
		var out raft.Log
		err := decodeEntry(9, tc.corrupt(enc()), &out)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		}
	}
}

// GetLog allocates once: the copy of data and extensions raft keeps.
func TestGetLogAllocs(t *testing.T) {
	s := newTest(t)
	logs := makeLogs(1, 50)
	logs[49].Extensions = []byte("ext")
	mustStore(t, s, logs)
	var e raft.Log
	for _, idx := range []uint64{50, 1} {
		allocs := testing.AllocsPerRun(200, func() {
			if err := s.GetLog(idx, &e); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 1 {
			t.Fatalf("GetLog(%d): %.1f allocations, want 1", idx, allocs)
		}
	}
	if err := s.DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	mustStore(t, s, []*raft.Log{{Index: 51}})
	if allocs := testing.AllocsPerRun(200, func() { _ = s.GetLog(51, &e) }); allocs != 0 {
		t.Fatalf("GetLog of an entry without data: %.1f allocations, want 0", allocs)
	}
}

// An entry over the log's record limit is refused with nothing written; a
// batch holding one is refused whole.
func TestStoreLogsTooLarge(t *testing.T) {
	s := newTest(t)
	mustStore(t, s, makeLogs(1, 3))
	big := &raft.Log{Index: 5, Data: make([]byte, testOptions().Log.MaxRecordBytes)}
	batch := append(makeLogs(4, 1), big)
	if err := s.StoreLogs(batch); err == nil {
		t.Fatal("a batch with an entry over MaxRecordBytes was stored")
	}
	checkContents(t, s, 1, 3)
	mustStore(t, s, makeLogs(4, 1))
	checkContents(t, s, 1, 4)
}

// Batches whose indexes would run past the last offset a log can hold are
// refused, and index arithmetic never wraps.
func TestStoreLogsExtremeIndexes(t *testing.T) {
	s := newTest(t)
	wrap := []*raft.Log{{Index: math.MaxUint64}, {Index: 0}}
	if err := s.StoreLogs(wrap); err == nil {
		t.Fatal("a batch wrapping around 2^64 was stored")
	}
	if err := s.StoreLogs([]*raft.Log{{Index: math.MaxUint64}}); err == nil {
		t.Fatal("an entry at index 2^64-1 was stored")
	}
	top := uint64(math.MaxUint64 - 1)
	mustStore(t, s, []*raft.Log{{Index: top - 1, Data: []byte("a")}, {Index: top, Data: []byte("b")}})
	if f, l := span(t, s); f != top-1 || l != top {
		t.Fatalf("[%d, %d], want [%d, %d]", f, l, top-1, top)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: top + 1}}); err == nil {
		t.Fatal("an entry past the last index was stored")
	}
	if err := s.DeleteRange(top, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if f, l := span(t, s); f != top-1 || l != top-1 {
		t.Fatalf("after a suffix delete: [%d, %d]", f, l)
	}
	if err := s.DeleteRange(0, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if f, l := span(t, s); f != 0 || l != 0 {
		t.Fatalf("after deleting everything: [%d, %d]", f, l)
	}
	mustStore(t, s, makeLogs(0, 2)) // index 0 too: raft never uses it, raft's benchmarks do
	checkContents(t, s, 0, 1)
}
