package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func attrsEqual(x, y Attrs) bool {
	return x.Due == y.Due && x.HasDue == y.HasDue &&
		bytes.Equal(x.Group, y.Group) && (x.Group == nil) == (y.Group == nil) &&
		bytes.Equal(x.Dedup, y.Dedup) && (x.Dedup == nil) == (y.Dedup == nil) &&
		x.Origin == y.Origin && x.HasOrigin == y.HasOrigin &&
		x.Receives == y.Receives && x.HasReceives == y.HasReceives &&
		x.Moved == y.Moved && x.HasMoved == y.HasMoved &&
		x.Queue == y.Queue && x.QueueOffset == y.QueueOffset && x.HasQueue == y.HasQueue
}

// section builds a section from raw entries, with L = the entries' size.
func section(entries ...[]byte) []byte {
	var body []byte
	for _, e := range entries {
		body = append(body, e...)
	}
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(body))), body...)
}

// entry builds one raw entry; the value length is len(value).
func entry(key byte, value []byte) []byte {
	return append([]byte{key, byte(len(value))}, value...)
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func TestSectionLayout(t *testing.T) {
	a := &Attrs{
		Due: 0x0102030405060708, HasDue: true,
		Group: []byte("gr"), Dedup: []byte("d"),
		Origin: 9, HasOrigin: true,
		Receives: 0x0a0b0c0d, HasReceives: true,
		Moved: 0xffffffffffffffff, HasMoved: true,
		Queue: 0x01020304, QueueOffset: 0x1112131415161718, HasQueue: true,
	}
	want := section(
		entry(1, u64(0x0102030405060708)),
		entry(2, []byte("gr")),
		entry(3, []byte("d")),
		entry(4, u64(9)),
		entry(5, u32(0x0a0b0c0d)),
		entry(6, u64(0xffffffffffffffff)),
		entry(7, append(u32(0x01020304), u64(0x1112131415161718)...)),
	)
	got := AppendSection([]byte{0xaa}, a)
	if got[0] != 0xaa || !bytes.Equal(got[1:], want) {
		t.Fatalf("AppendSection =\n% x\nwant\n% x", got[1:], want)
	}
	if a.SectionSize() != len(want) {
		t.Fatalf("SectionSize = %d, want %d", a.SectionSize(), len(want))
	}
	parsed, err := ParseSection(want)
	if err != nil || !attrsEqual(parsed, *a) {
		t.Fatalf("ParseSection = %+v, %v", parsed, err)
	}
	// Group and Dedup alias the input.
	if &parsed.Group[0] != &want[14] || cap(parsed.Group) != 2 {
		t.Fatal("Group is not a capacity-capped sub-slice of the section")
	}
}

func TestEmptyAndSectionSize(t *testing.T) {
	var nilAttrs *Attrs
	cases := []struct {
		name  string
		a     *Attrs
		empty bool
		size  int
	}{
		{"nil", nilAttrs, true, 0},
		{"zero", &Attrs{}, true, 0},
		{"values without flags", &Attrs{Due: 5, Origin: 6, Receives: 7, Moved: 8}, true, 0},
		{"due", &Attrs{HasDue: true}, false, 2 + 10},
		{"empty non-nil group", &Attrs{Group: []byte{}}, false, 2 + 2},
		{"group 128", &Attrs{Group: make([]byte, 128)}, false, 2 + 130},
		{"dedup 3", &Attrs{Dedup: []byte("abc")}, false, 2 + 5},
		{"origin", &Attrs{HasOrigin: true}, false, 2 + 10},
		{"receives", &Attrs{HasReceives: true}, false, 2 + 6},
		{"moved", &Attrs{HasMoved: true}, false, 2 + 10},
		{"queue", &Attrs{HasQueue: true}, false, 2 + 14},
	}
	for _, c := range cases {
		if got := c.a.Empty(); got != c.empty {
			t.Errorf("%s: Empty = %v", c.name, got)
		}
		if got := c.a.SectionSize(); got != c.size {
			t.Errorf("%s: SectionSize = %d, want %d", c.name, got, c.size)
		}
	}
	if got := AppendSection([]byte("x"), &Attrs{Due: 5}); string(got) != "x" {
		t.Errorf("AppendSection of empty attrs appended % x", got[1:])
	}
}

func TestValidate(t *testing.T) {
	var nilAttrs *Attrs
	cases := []struct {
		name string
		a    *Attrs
		ok   bool
	}{
		{"nil", nilAttrs, true},
		{"zero", &Attrs{}, true},
		{"group 1", &Attrs{Group: []byte{0}}, true},
		{"group 128", &Attrs{Group: make([]byte, 128)}, true},
		{"dedup 128", &Attrs{Dedup: make([]byte, 128)}, true},
		{"group empty", &Attrs{Group: []byte{}}, false},
		{"group 129", &Attrs{Group: make([]byte, 129)}, false},
		{"dedup empty", &Attrs{Dedup: []byte{}}, false},
		{"dedup 300", &Attrs{Dedup: make([]byte, 300)}, false},
	}
	for _, c := range cases {
		err := c.a.Validate()
		if c.ok && err != nil {
			t.Errorf("%s: Validate = %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, ErrInvalidAttrs) {
			t.Errorf("%s: Validate = %v, want ErrInvalidAttrs", c.name, err)
		}
	}
}

func TestParseSectionUnknownKeys(t *testing.T) {
	sec := section(
		entry(9, []byte("future")),
		entry(2, []byte("g")),
		entry(255, nil),
		entry(8, make([]byte, 255)),
		entry(1, u64(77)),
	)
	a, err := ParseSection(sec)
	if err != nil {
		t.Fatal(err)
	}
	want := Attrs{Group: []byte("g"), Due: 77, HasDue: true}
	if !attrsEqual(a, want) {
		t.Fatalf("ParseSection = %+v, want %+v", a, want)
	}
	// The same section inside a record decodes, unknown keys and all.
	rec := make([]byte, 16, 16+len(sec)+3)
	rec = append(append(rec, sec...), "abc"...)
	binary.BigEndian.PutUint32(rec, AttrFlag|uint32(len(rec)-4))
	binary.BigEndian.PutUint64(rec[8:], 44)
	v, err := Decode(reseal(rec), 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.ID != 44 || string(v.Body) != "abc" || !bytes.Equal(v.Section, sec) {
		t.Fatalf("Decode = %+v", v)
	}
	if got, err := v.Attrs(); err != nil || !attrsEqual(got, want) {
		t.Fatalf("View.Attrs = %+v, %v", got, err)
	}
	// A section with L = 0 and the flag set is accepted and empty.
	if a, err := ParseSection([]byte{0, 0}); err != nil || !a.Empty() {
		t.Fatalf("ParseSection(L=0) = %+v, %v", a, err)
	}
}

func TestParseSectionMalformed(t *testing.T) {
	g := entry(2, []byte("g"))
	cases := []struct {
		name    string
		sec     []byte
		message string
	}{
		{"nil", nil, "shorter than"},
		{"one byte", []byte{0}, "shorter than"},
		{"key 0", section(entry(0, []byte("x"))), "key 0"},
		{"key 0 after good key", section(g, entry(0, nil)), "key 0"},
		{"repeated key", section(g, entry(1, u64(1)), g), "repeated"},
		{"repeated unknown key", section(entry(9, nil), entry(9, nil)), "repeated"},
		{"entry overruns L", append([]byte{0, 3}, 2, 5, 'a'), "overruns"},
		{"entry header overruns L", section(g, []byte{1}), "overruns"},
		{"underfill: bytes past L", append(section(g), 0), "do not fill"},
		{"L past section", []byte{0, 9, 2, 1, 'g'}, "runs past"},
		{"due 7 bytes", section(entry(1, make([]byte, 7))), "due"},
		{"due 9 bytes", section(entry(1, make([]byte, 9))), "due"},
		{"origin 4 bytes", section(entry(4, make([]byte, 4))), "origin"},
		{"receives 8 bytes", section(entry(5, make([]byte, 8))), "receives"},
		{"receives 0 bytes", section(entry(5, nil)), "receives"},
		{"moved 16 bytes", section(entry(6, make([]byte, 16))), "moved"},
		{"group length 0", section(entry(2, nil)), "group"},
		{"group length 129", section(entry(2, make([]byte, 129))), "group"},
		{"dedup length 0", section(entry(3, nil)), "dedup"},
		{"dedup length 255", section(entry(3, make([]byte, 255))), "dedup"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := ParseSection(c.sec)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ParseSection(% x) = %+v, %v; want ErrCorrupt", c.sec, a, err)
			}
			if !strings.Contains(err.Error(), c.message) {
				t.Fatalf("error %q does not contain %q", err, c.message)
			}
			if !a.Empty() {
				t.Fatalf("partial Attrs returned with error: %+v", a)
			}
			if len(c.sec) < 2 || int(binary.BigEndian.Uint16(c.sec))+2 != len(c.sec) {
				return // L does not match: a record cannot carry it as is
			}
			// The same section inside a well-sealed record is damage too.
			rec := make([]byte, 16, 16+len(c.sec)+1)
			rec = append(append(rec, c.sec...), 'b')
			binary.BigEndian.PutUint32(rec, AttrFlag|uint32(len(rec)-4))
			if _, err := Decode(reseal(rec), 0); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode with this section = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestAppendSectionPanicsOnInvalid(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("AppendSection with a 129-byte group did not panic")
		}
	}()
	AppendSection(nil, &Attrs{Group: make([]byte, 129)})
}

func TestSectionNamesQueueComparesTheQueueEntry(t *testing.T) {
	full := AppendSection(nil, &Attrs{HasDue: true, Due: 5, Group: []byte("g"), HasQueue: true, Queue: 7, QueueOffset: 42})
	only := AppendSection(nil, &Attrs{HasQueue: true, Queue: 7, QueueOffset: 42})
	// A section with a key above 7 after the queue entry: parsed whole.
	later := section(entry(7, append(u32(7), u64(42)...)), entry(9, []byte("x")))
	for _, c := range []struct {
		name string
		sec  []byte
		id   uint32
		off  uint64
		want bool
	}{
		{"full", full, 7, 42, true},
		{"only", only, 7, 42, true},
		{"later keys", later, 7, 42, true},
		{"other queue", full, 8, 42, false},
		{"other offset", only, 7, 43, false},
		{"no queue", AppendSection(nil, &Attrs{Group: []byte("g")}), 7, 42, false},
		{"empty", nil, 7, 42, false},
		{"short", only[:5], 7, 42, false},
	} {
		if got := SectionNamesQueue(c.sec, c.id, c.off); got != c.want {
			t.Errorf("%s: SectionNamesQueue = %v, want %v", c.name, got, c.want)
		}
	}
}
