package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/testkit"
)

// Names records: any bytes decode to a valid record or an ErrCorrupt
// error, never a panic; a valid one encodes back to the same bytes and
// names a queue the store accepts.
func FuzzStoreNameRecord(f *testing.F) {
	f.Add(encodeName(nameCreate, 1, "a"))
	f.Add(encodeName(nameCreate, 7, "orders.dead"))
	f.Add(encodeName(nameDelete, 1<<32-1, ""))
	f.Add([]byte{nameCreate, 0, 0, 0, 1, 'a', '/', 'b'})
	f.Add([]byte{3, 0, 0, 0, 1})
	f.Add([]byte{nameDelete})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, id, name, err := decodeName(b)
		if err != nil {
			if !errors.Is(err, engine.ErrCorrupt) {
				t.Fatalf("decodeName(%x) = %v, want ErrCorrupt", b, err)
			}
			return
		}
		if !bytes.Equal(encodeName(op, id, name), b) {
			t.Fatalf("decodeName(%x) = %d %d %q, which encodes to %x", b, op, id, name, encodeName(op, id, name))
		}
		if op == nameCreate && CheckQueueName(trimDead(name)) != nil && CheckQueueName(name) != nil {
			t.Fatalf("decodeName(%x) created the bad name %q", b, name)
		}
	})
}

// Heads records: any bytes decode to a head or an error, never a panic; a
// head decoded encodes back to the same bytes (version 3), and its end is
// never below its head.
func FuzzStoreHeadRecord(f *testing.F) {
	head := func(id uint32, h headState) []byte {
		return append(binary.BigEndian.AppendUint32(nil, id), encodeHead(h)...)
	}
	f.Add(head(1, headState{head: 3, end: 9, sides: true, dels: sideSpan{from: 2, durable: 4}}))
	f.Add(head(1<<32-1, headState{}))
	f.Add([]byte{0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 1, headVersion1})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, h, err := decodeHeadRecord(b)
		if err != nil {
			return
		}
		if h.end < h.head {
			t.Fatalf("decodeHeadRecord(%x): end %d below head %d", b, h.end, h.head)
		}
		if h.sides && !bytes.Equal(head(id, h), b) {
			t.Fatalf("decodeHeadRecord(%x) = %d %+v, which encodes to %x", b, id, h, head(id, h))
		}
	})
}

// The queue attribute (key 7): any attribute section parses or fails
// with ErrCorrupt, never a panic; a parsed queue attribute encodes back
// to a section that parses to the same queue and offset.
func FuzzStoreQueueAttribute(f *testing.F) {
	for _, a := range []record.Attrs{
		{HasQueue: true, Queue: 1, QueueOffset: 0},
		{HasQueue: true, Queue: 1<<32 - 1, QueueOffset: 1<<64 - 1, HasMoved: true, Moved: 3},
	} {
		f.Add(record.AppendSection(nil, &a))
	}
	f.Add([]byte{0, 3, 7, 1, 0})
	f.Add([]byte{0, 14, 7, 12, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := record.ParseSection(b)
		if err != nil {
			if !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("ParseSection(%x) = %v, want ErrCorrupt", b, err)
			}
			return
		}
		if !a.HasQueue {
			return
		}
		again, err := record.ParseSection(record.AppendSection(nil, &a))
		if err != nil || !again.HasQueue || again.Queue != a.Queue || again.QueueOffset != a.QueueOffset {
			t.Fatalf("ParseSection(%x) = %+v, which encodes to %+v, %v", b, a, again, err)
		}
	})
}

// A store whose names and heads segments are any bytes opens with an
// error or a report, and never hands out a message in a queue other than
// the one it was sent to (see TestStoreFilesDamagedMissingOrForeign...).
func FuzzStoreOpenWithNamesAndHeadsSegments(f *testing.F) {
	template := filepath.Join(f.TempDir(), "store")
	if err := buildFilesStore(template, []string{"a", "b"}); err != nil {
		f.Fatal(err)
	}
	seg := "00000000000000000000.log"
	read := func(sub string) []byte {
		b, err := os.ReadFile(filepath.Join(template, sub, seg))
		if err != nil {
			f.Fatal(err)
		}
		return bytes.TrimRight(b, "\x00")
	}
	names, heads := read(storeNamesDir), read(storeHeadsDir)
	f.Add(names, heads)
	f.Add(names[:len(names)/2], heads)
	f.Add([]byte{}, heads[:len(heads)/3])
	f.Add(heads, names)
	f.Fuzz(func(t *testing.T, names, heads []byte) {
		dir := filepath.Join(t.TempDir(), "store")
		if err := testkit.CopyDir(template, dir, true); err != nil {
			t.Fatal(err)
		}
		for sub, b := range map[string][]byte{storeNamesDir: names, storeHeadsDir: heads} {
			if err := os.WriteFile(filepath.Join(dir, sub, seg), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if failure, _ := storeFilesLook(dir); failure != "" {
			t.Fatal(failure)
		}
	})
}
