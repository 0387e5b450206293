package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// activeOpts shape the template log of FuzzOpenActiveSegment: small
// segments, so that a few records fill one, and a small record limit, so
// that the limit is easy to exceed.
var activeOpts = engine.Options{SegmentBytes: 1024, IndexIntervalBytes: 64, MaxRecordBytes: 200, FirstOffset: 1000}

// activeTemplate is a log written by the engine: one sealed segment, then
// an active segment holding a few good records, closed cleanly.
type activeTemplate struct {
	dir       string
	first     uint64       // first offset of the log
	base      uint64       // base offset of the active segment
	sealed    []wantRecord // the records of the sealed segment
	active    []wantRecord // the good records of the active segment
	positions []int64      // their positions, then the end of the last
	good      []byte       // the active file's bytes up to the end of its records
	maxLength uint32       // the log's maximum length field
}

func buildActiveTemplate(tb testing.TB, dir string) *activeTemplate {
	tb.Helper()
	l, err := engine.Open(dir, activeOpts)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; ; i++ {
		body, attrs := goodRecord(i)
		if _, err := l.AppendWith(body, attrs); err != nil {
			tb.Fatal(err)
		}
		if bases := segmentBases(tb, dir); len(bases) == 2 && l.Next()-bases[1] == 8 {
			break
		} else if len(bases) > 2 {
			tb.Fatalf("template: %d segments", len(bases))
		}
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	// A new log stores MaxRecordBytes 1 MiB whatever Options say (see
	// meta.with); store the small limit, so that records above it are
	// damage to the readers.
	writeMeta(tb, dir, activeOpts)
	bases := segmentBases(tb, dir)
	tpl := &activeTemplate{dir: dir, first: bases[0], base: bases[1], maxLength: record.MaxLength(activeOpts.MaxRecordBytes)}
	data, err := os.ReadFile(segmentFile(dir, tpl.base, segment.LogSuffix))
	if err != nil {
		tb.Fatal(err)
	}
	recs, end := refWalk(data, tpl.base, tpl.maxLength)
	if len(recs) != 8 || !testkit.AllZero(data[end:]) {
		tb.Fatalf("template: active segment holds %d records, then %d bytes", len(recs), len(data)-int(end))
	}
	tpl.good = data[:end]
	for _, r := range recs {
		tpl.active = append(tpl.active, wantFromView(r.view))
		tpl.positions = append(tpl.positions, r.pos)
	}
	tpl.positions = append(tpl.positions, end)
	for i := range tpl.base - tpl.first {
		body, attrs := goodRecord(int(i))
		w := wantRecord{body: body}
		if attrs != nil {
			w.attrs = *attrs
		}
		tpl.sealed = append(tpl.sealed, w)
	}
	return tpl
}

// Bits of FuzzOpenActiveSegment's mode. Bits 4-6 are a count of good
// records to cut off the template (modeLoose, tail only).
const (
	// modeWhole: the bytes are the whole active file, not a tail after the
	// template's good records. The index files and the clean-close marker
	// are removed (unless modeLoose), so that the engine has nothing but
	// the file to go on.
	modeWhole = 1 << iota
	// modeProgram: the data is a program that writes the bytes (see
	// buildTail), so that the fuzzer can make records with good
	// checksums, wrong ids, wrong lengths and so on.
	modeProgram
	// modeLoose keeps index entries and the marker that may point past the
	// longest good prefix: the engine may then trust a record there
	// (FORMAT.md allows it), so only served records are checked, not the
	// end.
	modeLoose
	// modeNoMarker removes the clean-close marker.
	modeNoMarker
	_
	_
	_
	// modeRecoveryPoint writes a recovery point (log.recovery) at the end
	// of the file: damage below it is stepped over, never cut (FORMAT.md),
	// so only served records are checked, as with modeLoose.
	modeRecoveryPoint
)

// appendedBody is what the test appends after the writable open.
var appendedBody = []byte("appended after recovery")

// FuzzOpenActiveSegment opens a log whose active segment holds arbitrary
// bytes, read-only and then for writing. Neither open may panic or fault.
// Each must serve exactly the longest good prefix of the file as a
// reference walker finds it (records from position 0 with ids base,
// base+1, ... up to the first that fails), read by Read, Records and
// Inspect. Where an index entry, a clean-close marker or a recovery point
// may rightly take the engine past that prefix (modeLoose,
// modeRecoveryPoint), every record it serves must still verify and be one
// the file holds, and a damaged one must read as ErrCorrupt. A record
// appended after the writable open must be the last one a reader finds
// after Close: no stale bytes may pass for a record after it.
func FuzzOpenActiveSegment(f *testing.F) {
	tpl := buildActiveTemplate(f, f.TempDir())
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		cut := 0
		if mode&modeLoose != 0 && mode&modeWhole == 0 {
			cut = int(mode >> 4 & 7)
		}
		loose := mode&(modeLoose|modeRecoveryPoint) != 0
		keep := len(tpl.active) - cut
		firstID := tpl.base + uint64(keep)
		var file []byte
		if mode&modeWhole != 0 {
			firstID = tpl.base
		} else {
			file = append(file, tpl.good[:tpl.positions[keep]]...)
		}
		if mode&modeProgram != 0 {
			data = buildTail(data, firstID)
		}
		file = append(file, data...)

		dir := filepath.Join(t.TempDir(), "log")
		testkit.MustCopyDir(t, tpl.dir, dir, true)
		active := segmentFile(dir, tpl.base, segment.LogSuffix)
		if err := os.WriteFile(active, file, 0o600); err != nil {
			t.Fatal(err)
		}
		if mode&modeWhole != 0 && mode&modeLoose == 0 {
			_ = os.Remove(segmentFile(dir, tpl.base, segment.IndexSuffix))
			_ = os.Remove(segmentFile(dir, tpl.base, segment.TimeIndexSuffix))
			_ = os.Remove(filepath.Join(dir, "log.clean"))
		}
		if mode&modeNoMarker != 0 {
			_ = os.Remove(filepath.Join(dir, "log.clean"))
		}
		if mode&modeRecoveryPoint != 0 {
			writeRecoveryPoint(t, dir, tpl.base, int64(len(file)))
		}
		marker := mode&(modeWhole|modeNoMarker) == 0
		checkOpenActive(t, tpl, dir, file, loose, marker)
	})
}

// checkOpenActive runs the opens and checks of FuzzOpenActiveSegment on a
// prepared directory whose active file holds file.
func checkOpenActive(t *testing.T, tpl *activeTemplate, dir string, file []byte, loose, marker bool) {
	// The read-only open reads the file as it is; the writable one grows a
	// file shorter than its clean-close marker's end to it with zeros (the
	// active segment is allocated in steps, so a shorter file is one cut
	// behind the marker's back), and reads the rest as it is.
	grownLen := len(file)
	if marker {
		grownLen = max(grownLen, int(tpl.positions[len(tpl.active)]))
	}
	grown := append(bytes.Clone(file), make([]byte, grownLen-len(file))...)
	wantRO := tpl.expect(file, marker)
	wantRW := tpl.expect(grown, marker)

	ro, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly: %v", err)
	}
	if tpl.wrongFirstID(file) {
		// A segment whose first record carries another id than its name
		// says holds none of the log's records: a read-only open reports
		// it and serves the records before it.
		wantRO = nil
	}
	checkLog(t, "read-only open", ro, tpl, wantRO, loose)
	checkOffsetForTime(t, ro)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	rw, err := engine.Open(dir, engine.Options{})
	if tpl.wrongFirstID(grown) {
		// A writable open refuses it: appending after it would reuse its
		// records' offsets.
		if !errors.Is(err, engine.ErrMisnamed) {
			t.Fatalf("Open of a segment whose first record has another id: %v, want ErrMisnamed", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	checkLog(t, "writable open", rw, tpl, wantRW, loose)
	off, err := rw.Append(appendedBody)
	if err != nil {
		t.Fatalf("Append after recovery: %v", err)
	}
	if off != rw.Next()-1 {
		t.Fatalf("Append after recovery gave offset %d, Next %d", off, rw.Next())
	}
	if r, err := rw.Read(off); err != nil || !bytes.Equal(r.Body, appendedBody) {
		t.Fatalf("Read of the appended record: %q, %v", r.Body, err)
	} else {
		r.Release()
	}
	next := rw.Next()
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}

	// After a clean close, a reader must find exactly what the writer had.
	again, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly after the writable session: %v", err)
	}
	defer again.Close()
	if again.Next() > next || !loose && again.Next() != next {
		t.Fatalf("after the writable session a reader serves [%d, %d); the writer ended at %d: "+
			"bytes past the appended record passed for records", again.First(), again.Next(), next)
	}
	if !loose {
		checkServes(t, "reopened", again, tpl.first, append(append(append([]wantRecord{}, tpl.sealed...), wantRW...), wantRecord{body: appendedBody}))
	} else {
		checkServedVerify(t, "reopened", again, tpl.maxLength)
	}
}

// writeRecoveryPoint writes log.recovery (FORMAT.md, "log.recovery"): every
// byte of the active segment at base below pos was synced.
func writeRecoveryPoint(t *testing.T, dir string, base uint64, pos int64) {
	b := make([]byte, 25, 29)
	b[0] = 1
	binary.BigEndian.PutUint64(b[1:], base)
	binary.BigEndian.PutUint64(b[9:], uint64(pos))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, record.Table))
	writeFile(t, filepath.Join(dir, "log.recovery"), b)
}

// expect returns the records a log must serve from its active segment when
// that segment's file holds file (see refActive). A clean-close marker that
// checks out (the template's, when zeros follow the template's records)
// is trusted: nothing past it is walked.
func (tpl *activeTemplate) expect(file []byte, marker bool) []wantRecord {
	end := tpl.positions[len(tpl.active)]
	if marker && int64(len(file)) >= end && bytes.Equal(file[:end], tpl.good) &&
		testkit.AllZero(file[end:min(len(file), int(end)+record.HeaderSize)]) {
		return append([]wantRecord(nil), tpl.active...)
	}
	return refActive(file, tpl.base, tpl.maxLength, int(tpl.maxLength)+4)
}

// wrongFirstID reports whether the file starts with a record that verifies
// but carries another id than the segment's base offset.
func (tpl *activeTemplate) wrongFirstID(file []byte) bool {
	v, err := record.Decode(file, tpl.maxLength)
	return err == nil && v.ID != tpl.base
}

// checkLog checks what an opened log serves: exactly the sealed records
// and want (strict), or only records that verify (loose).
func checkLog(t *testing.T, what string, l *engine.Log, tpl *activeTemplate, want []wantRecord, loose bool) {
	t.Helper()
	if loose {
		if l.First() != tpl.first {
			t.Fatalf("%s: First %d, want %d", what, l.First(), tpl.first)
		}
		checkServedVerify(t, what, l, tpl.maxLength)
		return
	}
	checkServes(t, what, l, tpl.first, append(append([]wantRecord{}, tpl.sealed...), want...))
}

// checkOffsetForTime asks the time index about a few times: no panic, and
// an answer in [First, Next].
func checkOffsetForTime(t *testing.T, l *engine.Log) {
	t.Helper()
	for _, at := range []time.Time{time.UnixMilli(0), time.UnixMilli(-1 << 62), time.Now().Add(-time.Hour), time.Now(), time.Now().Add(time.Hour), time.UnixMilli(1 << 62)} {
		off, err := l.OffsetForTime(at)
		if err != nil {
			t.Fatalf("OffsetForTime(%v): %v", at, err)
		}
		if off < l.First() || off > l.Next() {
			t.Fatalf("OffsetForTime(%v) = %d, outside [%d, %d]", at, off, l.First(), l.Next())
		}
	}
}

// buildTail interprets prog as a small program that writes segment bytes,
// so that the fuzzer can produce records whose checksums hold. ids start at
// firstID and grow by one with every record written, good or not. Each
// operation is one byte (its value mod 8), then its arguments; missing
// argument bytes read as zero.
//
//	0 n a ...  a good record: n%64 body bytes (from prog), attributes a (see progAttrs)
//	1 d n ...  a good record whose id is off by int8(d): n%16 body bytes
//	2 n ...    n%32 raw bytes copied from prog
//	3 n        n zero bytes
//	4 p p b    flip bit b%8 of the byte at (p<<8|p) mod the length so far
//	5 n        cut the last n%32 bytes
//	6 l l n .. a good record (n%64 body bytes) whose length field's low 16 bits are then set to l
//	7 n        a good record whose length exceeds the log's maximum by n
func buildTail(prog []byte, firstID uint64) []byte {
	r := progReader{b: prog}
	var out []byte
	id := firstID
	for r.more() && len(out) < 1<<16 {
		switch r.byte() % 8 {
		case 0:
			body := r.bytes(int(r.byte() % 64))
			attrs, flip := progAttrs(&r)
			out = appendRecord(out, id, attrs, body, flip)
			id++
		case 1:
			d := int8(r.byte())
			out = record.Append(out, id+uint64(int64(d)), nil, r.bytes(int(r.byte()%16)))
			id++
		case 2:
			out = append(out, r.bytes(int(r.byte()%32))...)
		case 3:
			out = append(out, make([]byte, r.byte())...)
		case 4:
			p := int(r.byte())<<8 | int(r.byte())
			b := r.byte() % 8
			if len(out) > 0 {
				out[p%len(out)] ^= 1 << b
			}
		case 5:
			out = out[:len(out)-min(len(out), int(r.byte()%32))]
		case 6:
			l := uint32(r.byte())<<8 | uint32(r.byte())
			start := len(out)
			out = record.Append(out, id, nil, r.bytes(int(r.byte()%64)))
			raw := binary.BigEndian.Uint32(out[start:])
			binary.BigEndian.PutUint32(out[start:], raw&^0xffff|l)
			id++
		case 7:
			over := int(r.byte())
			body := make([]byte, activeOpts.MaxRecordBytes+record.MaxSectionSize+over)
			out = record.Append(out, id, nil, body)
			id++
		}
	}
	return out
}

// progAttrs reads an attribute byte and the values it calls for: bit 0
// due, 1 group, 2 dedup, 3 origin, 4 receives, 5 moved; bit 6 asks for the
// attribute flag to be flipped after encoding.
func progAttrs(r *progReader) (*record.Attrs, bool) {
	bits := r.byte()
	a := &record.Attrs{}
	if bits&1 != 0 {
		a.Due, a.HasDue = int64(binary.BigEndian.Uint64(r.bytes(8))), true
	}
	if bits&2 != 0 {
		a.Group = r.bytes(1 + int(r.byte()%4))
	}
	if bits&4 != 0 {
		a.Dedup = r.bytes(1 + int(r.byte()%4))
	}
	if bits&8 != 0 {
		a.Origin, a.HasOrigin = binary.BigEndian.Uint64(r.bytes(8)), true
	}
	if bits&16 != 0 {
		a.Receives, a.HasReceives = binary.BigEndian.Uint32(r.bytes(4)), true
	}
	if bits&32 != 0 {
		a.Moved, a.HasMoved = binary.BigEndian.Uint64(r.bytes(8)), true
	}
	return a, bits&64 != 0
}

// appendRecord appends a good record, its attribute flag flipped if asked.
func appendRecord(out []byte, id uint64, a *record.Attrs, body []byte, flip bool) []byte {
	start := len(out)
	out = record.Append(out, id, a, body)
	if flip {
		out[start] ^= 0x80
	}
	return out
}

// progReader reads a fuzz program; past its end it reads zeros.
type progReader struct {
	b []byte
	i int
}

func (r *progReader) more() bool { return r.i < len(r.b) }

func (r *progReader) byte() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *progReader) bytes(n int) []byte {
	out := make([]byte, n)
	r.i += copy(out, r.b[min(r.i, len(r.b)):])
	return out
}

func activeSegmentSeeds(tb testing.TB) []seed {
	tpl := buildActiveTemplate(tb, tb.TempDir())
	next := record.Append(nil, tpl.base+uint64(len(tpl.active)), nil, []byte("the next record"))
	flipped := func(b []byte, at int) []byte {
		b = bytes.Clone(b)
		b[at] ^= 0x10
		return b
	}
	ff := bytes.Repeat([]byte{0xff}, 64)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// A record whose last bytes are zeros, cut before them: whole in the
	// writable open, which grows the file with zeros, not in a read-only one.
	zeroEnd := record.Append(nil, tpl.base, nil, []byte("abc\x00\x00\x00"))
	mid := int(tpl.positions[3]) + 20 // inside the fourth record
	s := func(name string, mode uint8, data []byte) seed { return seed{name, []any{mode, data}} }
	return []seed{
		s("template", 0, nil),
		s("zeros", 0, make([]byte, 64)),
		s("ones", 0, ff),
		s("format-vector", 0, formatVector),
		s("next-record", 0, next),
		s("next-record-torn", 0, next[:20]),
		s("next-record-bitflip", 0, flipped(next, 20)),
		s("next-record-then-garbage", 0, cat(next, ff)),
		s("next-record-twice", 0, cat(next, next)),
		s("zeros-then-record", 0, cat(make([]byte, 16), next)),
		s("zeros-then-junk-no-marker", modeNoMarker, cat(make([]byte, 16), ff)),
		// Zeros where the record appended after the open goes, then a record
		// with the id after it: a clean-close marker is trusted (zeros at its
		// end), so the tail past it is never zeroed.
		s("stale-record-after-append", modeProgram, []byte{3, byte(record.HeaderSize + len(appendedBody)), 1, 1, 5, 's', 't', 'a', 'l', 'e'}),
		s("program-records", modeProgram, []byte{0, 4, 0, 'a', 'b', 'c', 'd', 0, 2, 0x3f, 'x', 'y',
			0, 0, 0, 0, 0, 0, 0, 1, 1, 'g', 1, 'd', 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4}),
		s("program-damage-then-good", modeProgram, []byte{0, 4, 0, 'a', 'b', 'c', 'd', 4, 0, 20, 3, 0, 4, 0, 'e', 'f', 'g', 'h'}),
		s("program-flag-flip", modeProgram, []byte{0, 3, 0x42, 'a', 'b', 'c', 2, 'g', 'g', 0, 1, 0, 'z'}),
		s("program-bad-length", modeProgram, []byte{6, 0xff, 0xff, 4, 'a', 'b', 'c', 'd'}),
		s("program-too-large", modeProgram, []byte{7, 1}),
		s("program-wrong-id", modeProgram, []byte{1, 0xff, 4, 'a', 'b', 'c', 'd'}),
		s("program-torn", modeProgram, []byte{0, 40, 0, 'a', 5, 20}),
		s("whole-empty", modeWhole, nil),
		s("whole-zeros", modeWhole, make([]byte, 4096)),
		s("whole-template", modeWhole, tpl.good),
		s("whole-template-bitflip", modeWhole, flipped(tpl.good, mid)),
		s("whole-format-vector", modeWhole, formatVector),
		s("whole-program", modeWhole|modeProgram, []byte{0, 4, 0, 'a', 'b', 'c', 'd', 0, 0, 0, 1, 0, 0, 0, 5}),
		s("whole-zero-end-cut", modeWhole, zeroEnd[:len(zeroEnd)-3]),
		s("loose-cut3-garbage", modeLoose|3<<4, ff),
		s("loose-cut7", modeLoose|7<<4, nil),
		s("recovery-point-template", modeRecoveryPoint, nil),
		s("recovery-point-damage-then-good", modeRecoveryPoint|modeProgram|modeNoMarker, []byte{0, 4, 0, 'a', 'b', 'c', 'd', 4, 0, 20, 3, 0, 4, 0, 'e', 'f', 'g', 'h', 0, 2, 0, 'i', 'j'}),
		s("recovery-point-whole-bitflip", modeRecoveryPoint|modeWhole, flipped(tpl.good, mid)),
		s("recovery-point-whole-zeros-in-middle", modeRecoveryPoint|modeWhole, cat(tpl.good[:tpl.positions[2]], make([]byte, 40), tpl.good[tpl.positions[3]:])),
		s("recovery-point-cut3-garbage-then-record", modeRecoveryPoint|modeLoose|3<<4, cat(ff[:7], tpl.good[tpl.positions[6]:])),
		s("loose-cut4-rewritten", modeLoose|4<<4, []byte{0, 7, 0, 'r', 'e', 'w', 'r', 'i', 't', 'e', 0, 9, 0, 'r', 'e', 'w', 'r', 'i', 't', 't', 'e', 'n'}),
		s("loose-cut2-last-record-again", modeLoose|2<<4, cat(make([]byte, int(tpl.positions[7]-tpl.positions[6])), tpl.good[tpl.positions[7]:])),
		s("loose-whole-template", modeWhole|modeLoose, tpl.good),
		s("loose-whole-bitflip", modeWhole|modeLoose, flipped(tpl.good, mid)),
	}
}
