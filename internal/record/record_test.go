package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"os"
	"strings"
	"testing"
)

const (
	vectorBody     = `{"order":4127,"email":"confirmation"}`
	vectorID       = 1268410
	vectorLength   = 49
	vectorChecksum = 0x4405f473
	bitflipCRC     = 0xe6107f47
)

func readVector(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reseal recomputes the checksum of a hand-damaged record so that the
// damage reaches the checks after the checksum.
func reseal(rec []byte) []byte {
	binary.BigEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], Table))
	return rec
}

func TestVectorEncode(t *testing.T) {
	want := readVector(t, "asha-record.bin")
	dst := make([]byte, 64)
	n, err := Encode(dst, vectorID, nil, []byte(vectorBody))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) || n != 53 {
		t.Fatalf("Encode size = %d, want %d (file) and 53", n, len(want))
	}
	if !bytes.Equal(dst[:n], want) {
		t.Fatalf("Encode =\n% x\nwant\n% x", dst[:n], want)
	}
	if got := Append(nil, vectorID, &Attrs{}, []byte(vectorBody)); !bytes.Equal(got, want) {
		t.Fatalf("Append with empty Attrs =\n% x\nwant\n% x", got, want)
	}
	length, hasAttrs, sum, id, ok := Header(want)
	if !ok || length != vectorLength || hasAttrs || sum != vectorChecksum || id != vectorID {
		t.Fatalf("Header = %d %v %#x %d %v", length, hasAttrs, sum, id, ok)
	}
}

func TestVectorDecode(t *testing.T) {
	good := readVector(t, "asha-record.bin")
	for _, max := range []uint32{0, vectorLength, MaxLength(len(vectorBody))} {
		v, err := Decode(good, max)
		if err != nil {
			t.Fatalf("max %d: %v", max, err)
		}
		if v.ID != vectorID || string(v.Body) != vectorBody || v.Size != 53 ||
			v.Checksum != vectorChecksum || v.Section != nil {
			t.Fatalf("max %d: Decode = %+v", max, v)
		}
	}
	// Trailing bytes (the next record, a zero tail) do not matter.
	v, err := Decode(append(append([]byte{}, good...), 0, 0, 0, 0), 0)
	if err != nil || v.Size != 53 || string(v.Body) != vectorBody {
		t.Fatalf("with trailing zeros: %+v, %v", v, err)
	}
}

func TestVectorBitflip(t *testing.T) {
	good := readVector(t, "asha-record.bin")
	bad := readVector(t, "asha-record-bitflip.bin")
	if good[25]^bad[25] != 1 || !bytes.Equal(good[:25], bad[:25]) || !bytes.Equal(good[26:], bad[26:]) {
		t.Fatal("bitflip vector is not the good vector with the low bit of byte 25 flipped")
	}
	if got := crc32.Checksum(bad[8:53], Table); got != bitflipCRC {
		t.Fatalf("CRC-32C of bitflip bytes 8..52 = %#x, want %#x", got, uint32(bitflipCRC))
	}
	if got := crc32.Checksum(good[8:53], Table); got != vectorChecksum {
		t.Fatalf("CRC-32C of good bytes 8..52 = %#x, want %#x", got, vectorChecksum)
	}
	_, err := Decode(bad, 0)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode(bitflip) = %v, want ErrCorrupt", err)
	}
	if !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Decode(bitflip) error %q does not mention the checksum", err)
	}
}

func TestRoundTrip(t *testing.T) {
	full := &Attrs{
		Due: -1700000000123, HasDue: true,
		Group: []byte("tenant-7"), Dedup: bytes.Repeat([]byte{'d'}, MaxIDBytes),
		Origin: 1 << 40, HasOrigin: true,
		Receives: 0xfffffffe, HasReceives: true,
		Moved: 42, HasMoved: true,
	}
	cases := []struct {
		name string
		id   uint64
		a    *Attrs
		body []byte
	}{
		{"empty body, no attrs", 0, nil, nil},
		{"empty body, empty attrs", 7, &Attrs{}, []byte{}},
		{"body, no attrs", 1<<64 - 1, nil, []byte("hello")},
		{"empty body, all attrs", 9, full, nil},
		{"body, all attrs", 10, full, bytes.Repeat([]byte{0xab}, 1000)},
		{"due only", 11, &Attrs{HasDue: true}, []byte("x")},
		{"group only", 12, &Attrs{Group: []byte{0}}, []byte("x")},
		{"dedup only", 13, &Attrs{Dedup: []byte("d")}, nil},
		{"origin only", 14, &Attrs{HasOrigin: true, Origin: 3}, nil},
		{"receives only", 15, &Attrs{HasReceives: true, Receives: 1}, nil},
		{"moved only", 16, &Attrs{HasMoved: true}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			size := Size(len(c.body), c.a)
			rec := Append([]byte("prefix"), c.id, c.a, c.body)[6:]
			if len(rec) != size {
				t.Fatalf("len = %d, Size = %d", len(rec), size)
			}
			length, hasAttrs, _, id, _ := Header(rec)
			if int(length) != size-4 || hasAttrs == c.a.Empty() || id != c.id {
				t.Fatalf("Header = %d %v %d", length, hasAttrs, id)
			}
			v, err := Decode(rec, MaxLength(len(c.body)))
			if err != nil {
				t.Fatal(err)
			}
			if v.ID != c.id || v.Size != size || !bytes.Equal(v.Body, c.body) {
				t.Fatalf("Decode = %+v", v)
			}
			if (v.Section == nil) != c.a.Empty() || len(v.Section) != c.a.SectionSize() {
				t.Fatalf("Section = % x, want %d bytes", v.Section, c.a.SectionSize())
			}
			got, err := v.Attrs()
			if err != nil {
				t.Fatal(err)
			}
			want := Attrs{}
			if c.a != nil {
				want = *c.a
			}
			if !attrsEqual(got, want) {
				t.Fatalf("Attrs = %+v, want %+v", got, want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good := readVector(t, "asha-record.bin")
	withAttrs := Append(nil, 5, &Attrs{Group: []byte("g"), HasDue: true}, []byte("body"))
	cases := []struct {
		name    string
		buf     []byte
		max     uint32
		want    error
		message string
	}{
		{"nil buffer", nil, 0, ErrCorrupt, "fewer than 4"},
		{"3 bytes", []byte{0, 0, 0}, 0, ErrCorrupt, "fewer than 4"},
		{"zero length", []byte{0, 0, 0, 0}, 0, ErrEnd, ""},
		{"zero tail", make([]byte, 4096), 0, ErrEnd, ""},
		{"length 0 with flag", []byte{0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, ErrCorrupt, "length 0 out of range"},
		{"length 11", append([]byte{0, 0, 0, 11}, make([]byte, 20)...), 0, ErrCorrupt, "length 11 out of range"},
		{"length past buffer", good[:52], 0, ErrCorrupt, "length 49 out of range"},
		{"header only", good[:16], 0, ErrCorrupt, "out of range"},
		{"length above max", good, vectorLength - 1, ErrCorrupt, "length 49 out of range"},
		{"flag set on a record without a section", withFlag(good), 0, ErrCorrupt, "runs past the record"},
		{"huge length", append([]byte{0x7f, 0xff, 0xff, 0xff}, good[4:]...), 0, ErrCorrupt, "out of range"},
		{"checksum byte", flip(good, 4), 0, ErrCorrupt, "checksum"},
		{"id byte", flip(good, 15), 0, ErrCorrupt, "checksum"},
		{"last body byte", flip(good, 52), 0, ErrCorrupt, "checksum"},
		{"length shortened", shorten(good), 0, ErrCorrupt, "checksum"},
		{"attrs section byte", flip(withAttrs, 19), 0, ErrCorrupt, "checksum"},
		{"flag set, no room for section length", noRoom(), 0, ErrCorrupt, "no room"},
		{"section length past record", secPast(withAttrs), 0, ErrCorrupt, "runs past the record"},
		{"section malformed", secKeyZero(withAttrs), 0, ErrCorrupt, "key 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := Decode(c.buf, c.max)
			if !errors.Is(err, c.want) {
				t.Fatalf("Decode = %+v, %v; want %v", v, err, c.want)
			}
			if c.want == ErrEnd && err != ErrEnd {
				t.Fatalf("ErrEnd must not be wrapped, got %v", err)
			}
			if !strings.Contains(err.Error(), c.message) {
				t.Fatalf("error %q does not contain %q", err, c.message)
			}
			if v.Body != nil || v.Section != nil || v.Size != 0 {
				t.Fatalf("View not zero on error: %+v", v)
			}
		})
	}
}

func flip(rec []byte, i int) []byte {
	b := append([]byte{}, rec...)
	b[i] ^= 1
	return b
}

func withFlag(rec []byte) []byte {
	b := append([]byte{}, rec...)
	b[0] |= 0x80
	return b
}

// shorten drops the last body byte from the length (the checksum then runs
// over the wrong bytes).
func shorten(rec []byte) []byte {
	b := append([]byte{}, rec...)
	binary.BigEndian.PutUint32(b, binary.BigEndian.Uint32(b)-1)
	return b
}

// noRoom is a well-sealed 17-byte record with the flag set and a single
// byte after the header: too short for the section length.
func noRoom() []byte {
	b := make([]byte, 17)
	binary.BigEndian.PutUint32(b, AttrFlag|13)
	return reseal(b)
}

// secPast makes the section length 1 byte longer than the rest of the
// record, with a valid checksum.
func secPast(rec []byte) []byte {
	b := append([]byte{}, rec...)
	length := binary.BigEndian.Uint32(b) & LengthMask
	binary.BigEndian.PutUint16(b[16:], uint16(length+4-16-2+1))
	return reseal(b)
}

// secKeyZero sets the first key of the section to 0, with a valid checksum.
func secKeyZero(rec []byte) []byte {
	b := append([]byte{}, rec...)
	b[18] = 0
	return reseal(b)
}

func TestHeaderShort(t *testing.T) {
	good := readVector(t, "asha-record.bin")
	if _, _, _, _, ok := Header(good[:15]); ok {
		t.Fatal("Header of 15 bytes: ok")
	}
	if _, _, _, _, ok := Header(nil); ok {
		t.Fatal("Header of nil: ok")
	}
	length, hasAttrs, _, id, ok := Header(withFlag(good[:16]))
	if !ok || !hasAttrs || length != vectorLength || id != vectorID {
		t.Fatalf("Header with flag = %d %v %d %v", length, hasAttrs, id, ok)
	}
}

func TestEncodeErrors(t *testing.T) {
	body := []byte(vectorBody)
	for _, size := range []int{0, 15, 16, 52} {
		dst := bytes.Repeat([]byte{0xee}, size)
		n, err := Encode(dst, 1, nil, body)
		if err != io.ErrShortBuffer || n != 0 {
			t.Fatalf("Encode into %d bytes = %d, %v; want io.ErrShortBuffer", size, n, err)
		}
		if !bytes.Equal(dst, bytes.Repeat([]byte{0xee}, size)) {
			t.Fatalf("Encode into %d bytes wrote to dst", size)
		}
	}
	a := &Attrs{Group: []byte("g")}
	if _, err := Encode(make([]byte, Size(len(body), a)-1), 1, a, body); err != io.ErrShortBuffer {
		t.Fatalf("Encode with attrs into short dst = %v", err)
	}
	if _, err := Encode(make([]byte, 1024), 1, &Attrs{Group: []byte{}}, body); !errors.Is(err, ErrInvalidAttrs) {
		t.Fatalf("Encode with empty group = %v, want ErrInvalidAttrs", err)
	}
	if _, err := Encode(make([]byte, 1024), 1, &Attrs{Dedup: make([]byte, 129)}, body); !errors.Is(err, ErrInvalidAttrs) {
		t.Fatalf("Encode with 129-byte dedup = %v, want ErrInvalidAttrs", err)
	}
	// Exactly sized and oversized dst both work; bytes past n are untouched.
	dst := bytes.Repeat([]byte{0xee}, 60)
	n, err := Encode(dst, vectorID, nil, body)
	if err != nil || n != 53 || !bytes.Equal(dst[53:], bytes.Repeat([]byte{0xee}, 7)) {
		t.Fatalf("Encode into 60 bytes = %d, %v, tail % x", n, err, dst[53:])
	}
}

func TestAppendPanicsOnInvalid(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Append with invalid attrs did not panic")
		}
	}()
	Append(nil, 1, &Attrs{Group: make([]byte, 200)}, nil)
}

func TestMaxLength(t *testing.T) {
	if MaxSectionSize != 2+(2+8)+(2+128)+(2+128)+(2+8)+(2+4)+(2+8)+(2+12) {
		t.Fatalf("MaxSectionSize = %d", MaxSectionSize)
	}
	cases := []struct {
		body int
		want uint32
	}{
		{-5, MinLength + MaxSectionSize},
		{0, MinLength + MaxSectionSize},
		{1 << 20, MinLength + MaxSectionSize + 1<<20},
		{LengthMask, LengthMask},
		{math.MaxInt, LengthMask},
	}
	for _, c := range cases {
		if got := MaxLength(c.body); got != c.want {
			t.Errorf("MaxLength(%d) = %d, want %d", c.body, got, c.want)
		}
	}
	// The largest record a writer with body limit 100 can write decodes
	// under MaxLength(100); one more body byte does not.
	big := &Attrs{
		HasDue: true, Group: make([]byte, MaxIDBytes), Dedup: make([]byte, MaxIDBytes),
		HasOrigin: true, HasReceives: true, HasMoved: true, HasQueue: true,
	}
	if big.SectionSize() != MaxSectionSize {
		t.Fatalf("largest SectionSize = %d, want %d", big.SectionSize(), MaxSectionSize)
	}
	rec := Append(nil, 1, big, make([]byte, 100))
	if _, err := Decode(rec, MaxLength(100)); err != nil {
		t.Fatalf("largest record rejected: %v", err)
	}
	rec = Append(nil, 1, big, make([]byte, 101))
	if _, err := Decode(rec, MaxLength(100)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("record above MaxLength = %v, want ErrCorrupt", err)
	}
}

func TestAllocs(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 300)
	a := &Attrs{HasDue: true, Due: 1, Group: []byte("g"), Dedup: []byte("d"), HasReceives: true}
	dst := make([]byte, Size(len(body), a))
	rec := Append(nil, 3, a, body)
	bad := flip(rec, 30)
	zeros := make([]byte, 8)
	checks := []struct {
		name string
		f    func()
	}{
		{"Encode", func() { _, _ = Encode(dst, 3, a, body) }},
		{"Encode nil attrs", func() { _, _ = Encode(dst, 3, nil, body) }},
		{"Decode", func() { _, _ = Decode(rec, 0) }},
		{"Decode checksum mismatch", func() { _, _ = Decode(bad, 0) }},
		{"Decode end", func() { _, _ = Decode(zeros, 0) }},
		{"Encode short buffer", func() { _, _ = Encode(dst[:10], 3, a, body) }},
		{"ParseSection", func() { _, _ = ParseSection(rec[16 : 16+a.SectionSize()]) }},
	}
	for _, c := range checks {
		if n := testing.AllocsPerRun(100, c.f); n != 0 {
			t.Errorf("%s allocates %v times per run", c.name, n)
		}
	}
	if _, err := Decode(rec, 0); err != nil {
		t.Fatal(err)
	}
}

// TestEncodeSizedMatchesEncode: EncodeSized writes the bytes Encode
// writes, for records without attributes, with the queue attribute alone
// (its section written by a shortcut) and with every attribute.
func TestEncodeSizedMatchesEncode(t *testing.T) {
	body := []byte("a body")
	for name, a := range map[string]*Attrs{
		"none":       nil,
		"queue only": {HasQueue: true, Queue: 7, QueueOffset: 1 << 40},
		"all": {HasDue: true, Due: 5, Group: []byte("g"), Dedup: []byte("d"), HasOrigin: true, Origin: 9,
			HasReceives: true, Receives: 3, HasMoved: true, Moved: 11, HasQueue: true, Queue: 7, QueueOffset: 12},
	} {
		n := Size(len(body), a)
		want := make([]byte, n)
		if _, err := Encode(want, 42, a, body); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if k, err := EncodeSized(got, 42, a, body); err != nil || k != n {
			t.Fatalf("%s: EncodeSized = %d, %v; want %d", name, k, err, n)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: EncodeSized wrote %x, Encode %x", name, got, want)
		}
		v, err := Decode(got, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, err := v.Attrs(); err != nil || a != nil && (got.HasQueue != a.HasQueue || got.QueueOffset != a.QueueOffset) {
			t.Fatalf("%s: attrs %+v, %v", name, got, err)
		}
	}
}
