package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"github.com/pagelog/pagelog/internal/record"
)

// decodeMaxLengths are the maxLength values FuzzRecordDecode tries on every
// input, besides the input's own length field and one less.
var decodeMaxLengths = []uint32{0, record.MinLength, record.MaxLength(0), record.MaxLength(64), record.MaxLength(1 << 20), record.LengthMask, 1 << 31, ^uint32(0)}

// FuzzRecordDecode feeds arbitrary bytes to record.Decode under several
// maxLength values. Decode must never panic; its errors must be ErrEnd for
// a zero length and wrap ErrCorrupt otherwise; a raised maxLength must never
// turn an accepted record into a rejected one; and what it accepts must be
// what the reference encoder writes: record.Append of the decoded id,
// attributes and body gives back the very bytes when the section holds known
// keys in ascending order (what writers emit), and a record that decodes to
// the same thing otherwise (unknown keys, keys out of order).
func FuzzRecordDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParseSection(t, data)
		if _, _, _, _, ok := record.Header(data); ok != (len(data) >= record.HeaderSize) {
			t.Fatalf("Header ok = %v on %d bytes", ok, len(data))
		}
		ref, refErr := record.Decode(data, 0)
		checkDecoded(t, data, 0, ref, refErr)
		maxes := decodeMaxLengths
		if len(data) >= 4 {
			own := binary.BigEndian.Uint32(data) & record.LengthMask
			maxes = append(maxes[:len(maxes):len(maxes)], own, own-1)
		}
		for _, m := range maxes {
			v, err := record.Decode(data, m)
			checkDecoded(t, data, m, v, err)
			eff := m
			if eff == 0 || eff > record.LengthMask {
				eff = record.LengthMask
			}
			if refErr == nil {
				// Only the bound can differ from the unbounded decode.
				if ok := uint32(ref.Size-4) <= eff; ok != (err == nil) {
					t.Fatalf("maxLength %d: length %d, err %v", m, ref.Size-4, err)
				}
			} else if err == nil {
				t.Fatalf("maxLength %d accepts what maxLength 0 rejects (%v)", m, refErr)
			}
		}
	})
}

// checkDecoded checks one result of record.Decode(data, maxLength).
func checkDecoded(t *testing.T, data []byte, maxLength uint32, v record.View, err error) {
	t.Helper()
	if err != nil {
		zero := len(data) >= 4 && binary.BigEndian.Uint32(data) == 0
		switch {
		case zero && err != record.ErrEnd:
			t.Fatalf("maxLength %d: zero length field gives %v, want the plain ErrEnd", maxLength, err)
		case !zero && (!errors.Is(err, record.ErrCorrupt) || errors.Is(err, record.ErrEnd)):
			t.Fatalf("maxLength %d: error %v does not wrap ErrCorrupt", maxLength, err)
		}
		return
	}
	raw := binary.BigEndian.Uint32(data)
	length := raw & record.LengthMask
	eff := maxLength
	if eff == 0 || eff > record.LengthMask {
		eff = record.LengthMask
	}
	switch {
	case v.Size != int(length)+4 || v.Size > len(data):
		t.Fatalf("Size %d for length field %d and %d bytes", v.Size, length, len(data))
	case length < record.MinLength || length > eff:
		t.Fatalf("accepted length %d outside [%d, %d]", length, record.MinLength, eff)
	case v.ID != binary.BigEndian.Uint64(data[8:]):
		t.Fatalf("ID %d, the bytes hold %d", v.ID, binary.BigEndian.Uint64(data[8:]))
	case v.Checksum != binary.BigEndian.Uint32(data[4:]):
		t.Fatalf("Checksum %08x, the bytes hold %08x", v.Checksum, binary.BigEndian.Uint32(data[4:]))
	case crc32.Checksum(data[8:v.Size], record.Table) != v.Checksum:
		t.Fatalf("accepted a record whose CRC-32C does not match")
	case cap(v.Body) != len(v.Body) || v.Section != nil && cap(v.Section) != len(v.Section):
		t.Fatalf("Body or Section capacity not capped at its length")
	case !bytes.Equal(v.Body, data[v.Size-len(v.Body):v.Size]):
		t.Fatalf("Body is not the end of the record")
	}
	if raw&record.AttrFlag == 0 {
		if v.Section != nil || len(v.Body) != v.Size-record.HeaderSize {
			t.Fatalf("no attribute flag, but a section of %d bytes", len(v.Section))
		}
	} else if len(v.Section) <= record.SectionLenSize || len(v.Section)+len(v.Body) != v.Size-record.HeaderSize ||
		!bytes.Equal(v.Section, data[record.HeaderSize:record.HeaderSize+len(v.Section)]) {
		t.Fatalf("attribute flag set: section %x and body of %d bytes do not split the record", v.Section, len(v.Body))
	}
	a, err := v.Attrs()
	if err != nil {
		t.Fatalf("Decode accepted a record whose Attrs fail: %v", err)
	}
	var enc []byte
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("record.Append panics on attributes Decode accepted (%+v): %v", a, p)
			}
		}()
		enc = record.Append(nil, v.ID, &a, v.Body)
	}()
	if v.Section == nil || canonicalSection(v.Section) {
		if !bytes.Equal(enc, data[:v.Size]) {
			t.Fatalf("accepted bytes the reference encoder does not write:\n got %x\nwant %x", data[:v.Size], enc)
		}
		return
	}
	// Unknown keys, or keys out of order: a reader accepts them (forward
	// compatibility); the writer's record must decode to the same.
	w, err := record.Decode(enc, 0)
	if err != nil {
		t.Fatalf("re-encoding does not decode: %v", err)
	}
	wa, _ := w.Attrs()
	if w.ID != v.ID || !bytes.Equal(w.Body, v.Body) || !attrsEqual(wa, a) {
		t.Fatalf("re-encoding decodes to id %d body %q attrs %+v, want %d %q %+v", w.ID, w.Body, wa, v.ID, v.Body, a)
	}
}

// checkParseSection runs ParseSection on arbitrary bytes: no panic, errors
// wrap ErrCorrupt, and a canonical section is exactly what AppendSection
// writes for the attributes it parses to.
func checkParseSection(t *testing.T, data []byte) {
	a, err := record.ParseSection(data)
	if err != nil {
		if !errors.Is(err, record.ErrCorrupt) {
			t.Fatalf("ParseSection error %v does not wrap ErrCorrupt", err)
		}
		return
	}
	if err := a.Validate(); err != nil {
		t.Fatalf("ParseSection accepted attributes a writer may not write: %v", err)
	}
	if canonicalSection(data) {
		if got := record.AppendSection(nil, &a); !bytes.Equal(got, data) {
			t.Fatalf("ParseSection accepted %x, AppendSection writes %x", data, got)
		}
	}
}

// Bits of FuzzRecordRoundTrip's present argument.
const (
	hasDue = 1 << iota
	hasGroup
	hasDedup
	hasOrigin
	hasReceives
	hasMoved
)

// FuzzRecordRoundTrip encodes a record from its parts and decodes it:
// invalid attributes and short buffers are refused without touching the
// buffer; a valid record decodes to exactly its parts, under the smallest
// maxLength that admits it and not under one less; no prefix of it is a
// record; and every single-bit flip is rejected, except the flips of bit 31
// (the attribute flag) that FORMAT.md's "Known limits of version 1" lists:
// those must give exactly the other reading.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Fuzz(func(t *testing.T, id uint64, body []byte, present uint8, due int64, group, dedup []byte, origin uint64, receives uint32, moved uint64) {
		if len(body) > 1<<16 {
			return
		}
		a := record.Attrs{
			Due: due, HasDue: present&hasDue != 0,
			Origin: origin, HasOrigin: present&hasOrigin != 0,
			Receives: receives, HasReceives: present&hasReceives != 0,
			Moved: moved, HasMoved: present&hasMoved != 0,
		}
		if present&hasGroup != 0 {
			a.Group = append([]byte{}, group...)
		}
		if present&hasDedup != 0 {
			a.Dedup = append([]byte{}, dedup...)
		}
		size := record.Size(len(body), &a)
		buf := bytes.Repeat([]byte{0xee}, size+8)
		invalid := a.Group != nil && (len(a.Group) == 0 || len(a.Group) > record.MaxIDBytes) ||
			a.Dedup != nil && (len(a.Dedup) == 0 || len(a.Dedup) > record.MaxIDBytes)
		n, err := record.Encode(buf, id, &a, body)
		if invalid {
			if !errors.Is(err, record.ErrInvalidAttrs) || n != 0 || !allEE(buf) {
				t.Fatalf("invalid attributes %+v: Encode = %d, %v (buffer touched: %v)", a, n, err, !allEE(buf))
			}
			return
		}
		if err != nil || n != size {
			t.Fatalf("Encode = %d, %v; want %d", n, err, size)
		}
		if !allEE(buf[n:]) {
			t.Fatalf("Encode wrote past the record")
		}
		short := bytes.Repeat([]byte{0xee}, size-1)
		if n, err := record.Encode(short, id, &a, body); err != io.ErrShortBuffer || n != 0 || !allEE(short) {
			t.Fatalf("Encode into %d bytes = %d, %v", size-1, n, err)
		}
		rec := buf[:n]
		if app := record.Append([]byte("prefix"), id, &a, body); !bytes.Equal(app[6:], rec) || string(app[:6]) != "prefix" {
			t.Fatalf("Append differs from Encode")
		}
		length := uint32(n - 4)
		v, err := record.Decode(buf, record.MaxLength(len(body))) // trailing bytes are not the record's
		if err != nil {
			t.Fatalf("Decode of an encoded record: %v", err)
		}
		got, err := v.Attrs()
		switch {
		case err != nil:
			t.Fatalf("Attrs: %v", err)
		case v.ID != id || v.Size != n || !bytes.Equal(v.Body, body):
			t.Fatalf("decoded id %d size %d body %q, want %d %d %q", v.ID, v.Size, v.Body, id, n, body)
		case !attrsEqual(got, a):
			t.Fatalf("decoded attributes %+v, want %+v", got, a)
		case a.Empty() != (v.Section == nil):
			t.Fatalf("attributes empty %v, section %x", a.Empty(), v.Section)
		case v.Section != nil && !canonicalSection(v.Section):
			t.Fatalf("the encoder wrote a section that is not canonical: %x", v.Section)
		}
		if _, err := record.Decode(rec, length); err != nil {
			t.Fatalf("maxLength = its own length %d: %v", length, err)
		}
		if _, err := record.Decode(rec, length-1); err == nil {
			t.Fatalf("maxLength %d accepts a length of %d", length-1, length)
		}
		for k := 0; k < n; k++ {
			if _, err := record.Decode(rec[:k], 0); err == nil {
				t.Fatalf("a %d-byte prefix of a %d-byte record decodes", k, n)
			}
			if k == 64 && n > 256 {
				k = n - 64 // the start and the end of a large record
			}
		}
		checkBitFlips(t, rec, a.Empty())
	})
}

// checkBitFlips flips single bits of an encoded record (all of them in
// small records; in large ones the header's and a sample of the rest) and
// checks each is rejected, but for the attribute flag's documented limits.
func checkBitFlips(t *testing.T, rec []byte, noAttrs bool) {
	bit := func(i int) {
		flipped := rec // flipped in place, and back on return
		flipped[i/8] ^= 0x80 >> (i % 8)
		defer func() { flipped[i/8] ^= 0x80 >> (i % 8) }()
		v, err := record.Decode(flipped, 0)
		if i != 0 { // not bit 31 of the length field
			if err == nil {
				t.Fatalf("flip of bit %d (byte %d) accepted: %+v", i%8, i/8, v)
			}
			return
		}
		if !noAttrs {
			// Known limit: cleared in error, the section reads as body.
			if err != nil || v.Section != nil || len(v.Body) != len(rec)-record.HeaderSize {
				t.Fatalf("attribute flag cleared: %+v, %v; FORMAT.md documents the whole payload served as body", v, err)
			}
			return
		}
		// Set in error: caught unless the body parses as a section.
		body := rec[record.HeaderSize:]
		parses := false
		if len(body) >= record.SectionLenSize {
			if end := record.SectionLenSize + int(binary.BigEndian.Uint16(body)); end > record.SectionLenSize && end <= len(body) {
				_, perr := record.ParseSection(body[:end])
				parses = perr == nil
			}
		}
		if parses != (err == nil) {
			t.Fatalf("attribute flag set over body %x: body parses as a section %v, Decode error %v", body, parses, err)
		}
	}
	bits := len(rec) * 8
	if len(rec) <= 512 {
		for i := range bits {
			bit(i)
		}
		return
	}
	for i := range record.HeaderSize * 8 {
		bit(i)
	}
	for i := record.HeaderSize * 8; i < bits; i += bits/128 + 1 {
		bit(i)
	}
	bit(bits - 1)
}

func allEE(b []byte) bool {
	for _, c := range b {
		if c != 0xee {
			return false
		}
	}
	return true
}

// formatVector is the test vector of FORMAT.md: body
// {"order":4127,"email":"confirmation"} at offset 1,268,410.
var formatVector = []byte{
	0x00, 0x00, 0x00, 0x31, 0x44, 0x05, 0xf4, 0x73, 0x00, 0x00, 0x00, 0x00, 0x00, 0x13, 0x5a, 0xba,
	0x7b, 0x22, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x22, 0x3a, 0x34, 0x31, 0x32, 0x37, 0x2c, 0x22, 0x65,
	0x6d, 0x61, 0x69, 0x6c, 0x22, 0x3a, 0x22, 0x63, 0x6f, 0x6e, 0x66, 0x69, 0x72, 0x6d, 0x61, 0x74,
	0x69, 0x6f, 0x6e, 0x22, 0x7d,
}

// rawRecord builds a record around an arbitrary payload (section and body)
// with a correct checksum: how damage that the checksum cannot see looks.
func rawRecord(id uint64, flag bool, payload []byte) []byte {
	b := make([]byte, record.HeaderSize, record.HeaderSize+len(payload))
	length := uint32(record.MinLength + len(payload))
	if flag {
		length |= record.AttrFlag
	}
	binary.BigEndian.PutUint32(b, length)
	binary.BigEndian.PutUint64(b[8:], id)
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[8:], record.Table))
	return b
}

// everyAttr sets every attribute, group and dedup at their largest.
func everyAttr() *record.Attrs {
	return &record.Attrs{
		Due: 1_700_000_000_000, HasDue: true,
		Group: bytes.Repeat([]byte{'g'}, record.MaxIDBytes), Dedup: bytes.Repeat([]byte{'d'}, record.MaxIDBytes),
		Origin: 42, HasOrigin: true, Receives: 3, HasReceives: true, Moved: 7, HasMoved: true,
	}
}

func recordDecodeSeeds(testing.TB) []seed {
	flip := bytes.Clone(formatVector)
	flip[25] ^= 1
	all := record.Append(nil, 9, everyAttr(), []byte("body"))
	small := record.Append(nil, 1, &record.Attrs{Group: []byte("g"), HasDue: true, Due: -1}, []byte("x"))
	sec := func(entries ...byte) []byte { // a section: L, then the entries
		return append(binary.BigEndian.AppendUint16(nil, uint16(len(entries))), entries...)
	}
	due := []byte{1, 8, 0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0x00}
	s := func(name string, data []byte) seed { return seed{name, []any{data}} }
	hugeLen := bytes.Clone(formatVector)
	binary.BigEndian.PutUint32(hugeLen, record.LengthMask)
	return []seed{
		s("format-vector", formatVector),
		s("format-vector-bitflip", flip),
		s("format-vector-flag-set", append([]byte{formatVector[0] | 0x80}, formatVector[1:]...)),
		s("format-vector-two", append(bytes.Clone(formatVector), formatVector...)),
		s("format-vector-trailing-garbage", append(bytes.Clone(formatVector), 0xff, 0x00, 0x13)),
		s("truncated-3", formatVector[:3]),
		s("truncated-header", formatVector[:15]),
		s("truncated-last-byte", formatVector[:52]),
		s("length-huge", hugeLen),
		s("length-below-min", append([]byte{0, 0, 0, 11}, formatVector[4:15]...)),
		s("empty", []byte{}),
		s("zero-length", make([]byte, 4)),
		s("zero-record", make([]byte, 16)),
		s("every-attribute", all),
		s("small-attributes", small),
		s("every-attribute-flag-cleared", append([]byte{all[0] &^ 0x80}, all[1:]...)),
		s("empty-body", record.Append(nil, 0, nil, nil)),
		s("flag-set-empty-section", rawRecord(5, true, sec())),
		s("flag-set-section-past-record", rawRecord(5, true, []byte{0, 200, 1})),
		s("flag-set-one-byte", rawRecord(5, true, []byte{0})),
		s("unknown-key", rawRecord(5, true, append(sec(7, 1, 'A'), "body"...))),
		s("unknown-key-and-due", rawRecord(5, true, append(sec(append(bytes.Clone(due), 200, 0)...), "body"...))),
		s("keys-descending", rawRecord(5, true, sec(3, 1, 'd', 2, 1, 'g'))),
		s("repeated-key", rawRecord(5, true, sec(2, 1, 'g', 2, 1, 'h'))),
		s("key-zero", rawRecord(5, true, sec(0, 1, 'z'))),
		s("entry-overruns-section", rawRecord(5, true, append([]byte{0, 3, 2, 5, 'g'}, "body"...))),
		s("entry-header-cut", rawRecord(5, true, sec(2, 1, 'g', 3))),
		s("due-wrong-size", rawRecord(5, true, sec(1, 4, 0, 0, 0, 1))),
		s("receives-wrong-size", rawRecord(5, true, sec(5, 8, 0, 0, 0, 0, 0, 0, 0, 1))),
		s("group-empty", rawRecord(5, true, sec(2, 0))),
		s("group-129", rawRecord(5, true, sec(append([]byte{2, 129}, bytes.Repeat([]byte{'g'}, 129)...)...))),
		s("section-only-due", rawRecord(5, true, sec(due...))),
	}
}

func recordRoundTripSeeds(testing.TB) []seed {
	json := []byte(`{"order":4127,"email":"confirmation"}`)
	s := func(name string, id uint64, body []byte, present uint8, due int64, group, dedup []byte, origin uint64, receives uint32, moved uint64) seed {
		return seed{name, []any{id, body, present, due, group, dedup, origin, receives, moved}}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 130)
	max := bytes.Repeat([]byte{'m'}, record.MaxIDBytes)
	return []seed{
		s("format-vector", 1268410, json, 0, 0, nil, nil, 0, 0, 0),
		s("every-attribute", 1268410, json, 0x3f, 1_700_000_000_000, []byte("orders"), []byte("order-4127"), 99, 2, 1268000),
		s("max-ids", 1, []byte("b"), hasGroup|hasDedup, 0, max, max, 0, 0, 0),
		s("empty-body-due", 0, nil, hasDue, -1, nil, nil, 0, 0, 0),
		s("empty-everything", ^uint64(0), nil, 0, 0, nil, nil, 0, 0, 0),
		s("group-empty-invalid", 3, []byte("x"), hasGroup, 0, []byte{}, nil, 0, 0, 0),
		s("dedup-129-invalid", 3, []byte("x"), hasDedup, 0, nil, append(bytes.Clone(max), 'x'), 0, 0, 0),
		s("body-parses-as-section", 4, []byte("\x00\x03\x07\x01Arest of the body"), 0, 0, nil, nil, 0, 0, 0),
		s("body-parses-as-due-section", 4, []byte("\x00\x0a\x01\x08\x00\x00\x01\x8b\xcf\xe5\x68\x00"), 0, 0, nil, nil, 0, 0, 0),
		s("large-body", 77, big, hasMoved|hasReceives, 0, nil, nil, 0, 1, 5),
	}
}
