package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// refRecord is one record found by the reference walker.
type refRecord struct {
	pos  int64
	view record.View
}

// refWalk is the reference walker of FORMAT.md, written independently of
// the engine's: records from position 0 with ids base, base+1, ..., each
// decoded with record.Decode under maxLength, up to the first that fails
// (a zero length included). It returns the good prefix and where it ends.
func refWalk(buf []byte, base uint64, maxLength uint32) (recs []refRecord, end int64) {
	for pos := 0; pos < len(buf); {
		v, err := record.Decode(buf[pos:], maxLength)
		if err != nil || v.ID != base+uint64(len(recs)) {
			break
		}
		recs = append(recs, refRecord{pos: int64(pos), view: v})
		pos += v.Size
		end = int64(pos)
	}
	return recs, end
}

// refActive is what a log serves of an active segment that holds buf
// (limit bytes of it may hold records), as FORMAT.md's rules say: the
// longest good prefix, then, past a record that fails its checks (or a zero
// length field with bytes after it within one record's reach, maxRecord
// bytes), the walk goes on at the first following record that verifies, if
// one starts within that reach and carries the expected id or a later one: the records in
// between are damage, reported, never cut. With no such record, the tail
// is cut there.
func refActive(buf []byte, base uint64, maxLength uint32, maxRecord int) []wantRecord {
	var want []wantRecord
	limit := len(buf)
	pos, id := 0, base
	for {
		recs, end := refWalk(buf[pos:], id, maxLength)
		for _, r := range recs {
			want = append(want, wantFromView(r.view))
		}
		pos += int(end)
		id += uint64(len(recs))
		if limit-pos < 4 {
			return want
		}
		reach := min(limit, pos+maxRecord+record.HeaderSize)
		if binary.BigEndian.Uint32(buf[pos:]) == 0 && testkit.AllZero(buf[pos:reach]) {
			return want
		}
		np, nid := refNextGood(buf, pos, id, reach, id+uint64(maxRecord+record.HeaderSize)/record.HeaderSize+2, maxLength)
		if np < 0 {
			return want
		}
		for ; id < nid; id++ {
			want = append(want, wantRecord{damaged: true})
		}
		pos = np
	}
}

// refNextGood finds the first record that starts in (pos, reach-16], with
// an id in [id, maxID), that verifies.
func refNextGood(buf []byte, pos int, id uint64, reach int, maxID uint64, maxLength uint32) (int, uint64) {
	for p := pos + 1; p+record.HeaderSize <= reach; p++ {
		got := binary.BigEndian.Uint64(buf[p+8:])
		if got < id || got >= maxID {
			continue
		}
		if v, err := record.Decode(buf[p:], maxLength); err == nil && v.ID == got {
			return p, got
		}
	}
	return -1, id
}

// attrsEqual compares two parsed attribute sets field by field.
func attrsEqual(a, b record.Attrs) bool {
	return a.HasDue == b.HasDue && (!a.HasDue || a.Due == b.Due) &&
		optEqual(a.Group, b.Group) && optEqual(a.Dedup, b.Dedup) &&
		a.HasOrigin == b.HasOrigin && (!a.HasOrigin || a.Origin == b.Origin) &&
		a.HasReceives == b.HasReceives && (!a.HasReceives || a.Receives == b.Receives) &&
		a.HasMoved == b.HasMoved && (!a.HasMoved || a.Moved == b.Moved)
}

// optEqual compares optional byte strings: nil (absent) differs from any
// present value.
func optEqual(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// canonicalSection reports whether an attributes section (its 2-byte
// length included) holds only known keys (1-7), in strictly ascending
// order, at least one of them: exactly the sections the reference encoder
// writes. It assumes the section parsed.
func canonicalSection(section []byte) bool {
	last := 0
	for p := record.SectionLenSize; p+record.EntryHeaderSize <= len(section); {
		key := int(section[p])
		if key < record.KeyDue || key > record.KeyQueue || key <= last {
			return false
		}
		last = key
		p += record.EntryHeaderSize + int(section[p+1])
	}
	return last != 0
}

// goodRecord returns the body and attributes of the i-th record the
// template logs hold: bodies of varied sizes, every fourth record with
// attributes (every key, in turn).
func goodRecord(i int) ([]byte, *record.Attrs) {
	body := make([]byte, (i*37)%97)
	for j := range body {
		body[j] = byte('a' + (i+j)%26)
	}
	if i%4 != 3 {
		return body, nil
	}
	a := &record.Attrs{}
	switch (i / 4) % 4 {
	case 0:
		a.Due, a.HasDue = 1_700_000_000_000+int64(i), true
		a.Group = []byte(fmt.Sprintf("group-%d", i))
	case 1:
		a.Dedup = []byte(fmt.Sprintf("dedup-%d", i))
		a.Receives, a.HasReceives = uint32(i), true
	case 2:
		a.Origin, a.HasOrigin = uint64(i)*1000, true
		a.Moved, a.HasMoved = uint64(i)*7, true
	default:
		a.Due, a.HasDue = -int64(i), true
		a.Group = []byte{byte(i)}
		a.Dedup = bytes.Repeat([]byte{'d'}, record.MaxIDBytes)
		a.Origin, a.HasOrigin = 1, true
		a.Receives, a.HasReceives = 2, true
		a.Moved, a.HasMoved = 3, true
	}
	return body, a
}

// wantRecord is a record a test expects the log to serve.
type wantRecord struct {
	body    []byte
	attrs   record.Attrs
	damaged bool // the log must report this offset as damage (ErrCorrupt), never serve it
}

func wantFromView(v record.View) wantRecord {
	a, err := v.Attrs()
	if err != nil {
		panic("wantFromView: a decoded record's section does not parse: " + err.Error())
	}
	w := wantRecord{body: bytes.Clone(v.Body), attrs: a}
	w.attrs.Group, w.attrs.Dedup = cloneOpt(a.Group), cloneOpt(a.Dedup)
	return w
}

func cloneOpt(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// checkRecord compares one served record with what is expected there.
func checkRecord(t *testing.T, what string, off uint64, body []byte, attrs record.Attrs, want wantRecord) {
	t.Helper()
	if !bytes.Equal(body, want.body) {
		t.Fatalf("%s: offset %d: body %q, want %q", what, off, body, want.body)
	}
	if !attrsEqual(attrs, want.attrs) {
		t.Fatalf("%s: offset %d: attributes %+v, want %+v", what, off, attrs, want.attrs)
	}
}

// checkServes checks that l serves exactly [first, first+len(want)) and
// that every record there, read by Read, by Records and by Inspect, is the
// expected one.
func checkServes(t *testing.T, what string, l *engine.Log, first uint64, want []wantRecord) {
	t.Helper()
	next := first + uint64(len(want))
	if l.First() != first || l.Next() != next {
		t.Fatalf("%s: serves [%d, %d), want [%d, %d)", what, l.First(), l.Next(), first, next)
	}
	for i, w := range want {
		off := first + uint64(i)
		r, err := l.Read(off)
		if w.damaged {
			if !errors.Is(err, engine.ErrCorrupt) {
				t.Fatalf("%s: Read(%d) of a damaged record: %v, want ErrCorrupt", what, off, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: Read(%d): %v", what, off, err)
		}
		a, err := r.Attrs()
		if err != nil {
			t.Fatalf("%s: Read(%d).Attrs: %v", what, off, err)
		}
		checkRecord(t, what+": Read", off, r.Body, a, w)
		r.Release()
	}
	for _, off := range []uint64{first - 1, next, next + 1} {
		if off >= first && off < next {
			continue
		}
		if r, err := l.Read(off); !errors.Is(err, engine.ErrNotFound) {
			r.Release()
			t.Fatalf("%s: Read(%d) outside [%d, %d): %v, want ErrNotFound", what, off, first, next, err)
		}
	}
	i := 0
	for r, err := range l.Records(first) {
		if i >= len(want) || r.Offset != first+uint64(i) {
			t.Fatalf("%s: Records yields offset %d as its record %d (%v)", what, r.Offset, i, err)
		}
		if want[i].damaged {
			if !errors.Is(err, engine.ErrCorrupt) {
				t.Fatalf("%s: Records at damaged %d: %v, want ErrCorrupt", what, r.Offset, err)
			}
			i++
			continue
		}
		if err != nil {
			t.Fatalf("%s: Records at %d: %v", what, r.Offset, err)
		}
		a, err := r.Attrs()
		if err != nil {
			t.Fatalf("%s: Records(%d).Attrs: %v", what, r.Offset, err)
		}
		checkRecord(t, what+": Records", r.Offset, r.Body, a, want[i])
		i++
	}
	if i != len(want) {
		t.Fatalf("%s: Records yields %d records, want %d", what, i, len(want))
	}
	i = 0
	for in := range l.Inspect(first) {
		if i >= len(want) || in.OK == want[i].damaged || in.Offset != first+uint64(i) {
			t.Fatalf("%s: Inspect: %+v", what, in)
		}
		i++
	}
	if i != len(want) {
		t.Fatalf("%s: Inspect yields %d records, want %d", what, i, len(want))
	}
}

// checkServedVerify is the weaker check for logs whose exact content the
// test cannot predict: every record in [First, Next) that Inspect reports
// good must be the record that record.Decode finds in the segment file at
// the position Inspect reports, with the offset as its id, and Read must
// serve exactly it; one that Inspect reports damaged must make Read fail
// with ErrCorrupt, never serve anything.
func checkServedVerify(t *testing.T, what string, l *engine.Log, maxLength uint32) {
	t.Helper()
	files := map[string][]byte{}
	n := uint64(0)
	for in := range l.Inspect(l.First()) {
		n++
		if in.Missing > 0 {
			// A range a checkpoint knows was used but the file no longer
			// holds: one info for all of it.
			n += in.Missing - 1
			if _, err := l.Read(in.Offset); !errors.Is(err, engine.ErrCorrupt) {
				t.Fatalf("%s: offset %d of a missing range reads with error %v", what, in.Offset, err)
			}
			continue
		}
		if !in.OK {
			if r, err := l.Read(in.Offset); !errors.Is(err, engine.ErrCorrupt) {
				r.Release()
				t.Fatalf("%s: offset %d, damaged (%v), reads with error %v", what, in.Offset, in.Err, err)
			}
			continue
		}
		data, ok := files[in.Segment]
		if !ok {
			var err error
			if data, err = os.ReadFile(filepath.Join(l.Dir(), in.Segment)); err != nil {
				t.Fatal(err)
			}
			files[in.Segment] = data
		}
		if in.Position < 0 || in.Position >= int64(len(data)) {
			t.Fatalf("%s: offset %d at position %d, outside %s (%d bytes)", what, in.Offset, in.Position, in.Segment, len(data))
		}
		v, err := record.Decode(data[in.Position:], maxLength)
		if err != nil || v.ID != in.Offset || int64(v.Size) != in.Size {
			t.Fatalf("%s: offset %d served from %s at %d, where the file holds %+v (%v)", what, in.Offset, in.Segment, in.Position, v, err)
		}
		r, err := l.Read(in.Offset)
		if err != nil {
			t.Fatalf("%s: Read(%d): %v", what, in.Offset, err)
		}
		a, err := r.Attrs()
		if err != nil {
			t.Fatalf("%s: Read(%d).Attrs: %v", what, in.Offset, err)
		}
		if w := wantFromView(v); !bytes.Equal(r.Body, w.body) || !attrsEqual(a, w.attrs) {
			// Damage can leave two records that verify with the same id
			// (below a recovery point, where it is stepped over): Read may
			// find another copy than the sequential scan. It must still be
			// one the file holds under that id.
			if !holdsRecord(data, in.Offset, r.Body, a, maxLength) {
				t.Fatalf("%s: Read(%d) serves body %q attributes %+v, which the segment holds nowhere under that id (Inspect: position %d, body %q)",
					what, in.Offset, r.Body, a, in.Position, w.body)
			}
		}
		r.Release()
	}
	if n != l.Next()-l.First() {
		t.Fatalf("%s: Inspect yields %d records in [%d, %d)", what, n, l.First(), l.Next())
	}
}

// holdsRecord reports whether a record with id, body and attributes lies
// anywhere in data, checksum and id verified.
func holdsRecord(data []byte, id uint64, body []byte, attrs record.Attrs, maxLength uint32) bool {
	var want [8]byte
	binary.BigEndian.PutUint64(want[:], id)
	for p := 8; p+8 <= len(data); p++ {
		k := bytes.Index(data[p:], want[:])
		if k < 0 {
			return false
		}
		p += k
		v, err := record.Decode(data[p-8:], maxLength)
		if err != nil || v.ID != id || !bytes.Equal(v.Body, body) {
			continue
		}
		if a, err := v.Attrs(); err == nil && attrsEqual(a, attrs) {
			return true
		}
	}
	return false
}

// segmentFile returns the path of one file of the segment at base.
func segmentFile(dir string, base uint64, suffix string) string {
	return filepath.Join(dir, segment.Name(base, suffix))
}

// segmentBases lists the base offsets of the .log files in dir.
func segmentBases(tb testing.TB, dir string) []uint64 {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var bases []uint64
	for _, e := range entries {
		if base, suffix, ok := segment.ParseName(e.Name()); ok && suffix == segment.LogSuffix {
			bases = append(bases, base)
		}
	}
	return bases
}

// writeMeta writes log.meta (FORMAT.md, "log.meta") with the settings of o.
func writeMeta(tb testing.TB, dir string, o engine.Options) {
	tb.Helper()
	b := make([]byte, 25, 29)
	b[0] = 1
	binary.BigEndian.PutUint64(b[1:], uint64(o.SegmentBytes))
	binary.BigEndian.PutUint32(b[9:], uint32(o.IndexIntervalBytes))
	binary.BigEndian.PutUint32(b[13:], uint32(o.MaxRecordBytes))
	binary.BigEndian.PutUint64(b[17:], o.FirstOffset)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, record.Table))
	if err := os.WriteFile(filepath.Join(dir, "log.meta"), b, 0o600); err != nil {
		tb.Fatal(err)
	}
}
