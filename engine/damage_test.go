package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

const damageSegBytes = 64 << 10

// damageSize gives records of 50-449 bytes: ~300 per segment, entries every
// ~15 records.
func damageSize(off uint64) int { return 50 + int(off*2654435761%400) }

// damageTemplate writes a closed log of at least five segments.
func damageTemplate(t testing.TB) (string, []int, []segLayout) {
	t.Helper()
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: damageSegBytes})
	sizes := appendN(t, l, 1500, damageSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := checkLayout(t, dir, 0, sizes, damageSegBytes)
	if len(segs) < 5 {
		t.Fatalf("only %d segments", len(segs))
	}
	return dir, sizes, segs
}

// patch writes b at pos of a file.
func patch(t testing.TB, path string, pos int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkAllExcept reads every record: those in bad must give ErrCorrupt,
// the others their body. Records must yield one error per bad offset, in
// place, and every other record.
func checkAllExcept(t testing.TB, l *Log, sizes []int, bad map[uint64]bool) {
	t.Helper()
	for i, s := range sizes {
		off := uint64(i)
		r, err := l.Read(off)
		if bad[off] {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read(%d) of a damaged record: %v, want ErrCorrupt", off, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if !bytes.Equal(r.Body, testBody(off, s-headerSize)) {
			t.Fatalf("Read(%d): wrong body", off)
		}
		r.Release()
	}
	want := uint64(0)
	for r, err := range l.Records(0) {
		if r.Offset != want {
			t.Fatalf("Records: offset %d where %d was expected (err %v)", r.Offset, want, err)
		}
		if bad[want] != (err != nil) {
			t.Fatalf("Records at %d: %v", want, err)
		}
		if err == nil && !bytes.Equal(r.Body, testBody(want, sizes[want]-headerSize)) {
			t.Fatalf("Records at %d: wrong body", want)
		}
		want++
	}
	if want != uint64(len(sizes)) {
		t.Fatalf("Records stopped at %d, want %d", want, len(sizes))
	}
}

// plainRecord returns a record index of s that has no index entry, and such
// that neither do the two records after it.
func plainRecord(s segLayout) int {
	es := sparseEntries(s.sizes, DefaultIndexIntervalBytes)
	has := map[int]bool{}
	for _, e := range es {
		has[int(e[0])] = true
	}
	for j := int(es[2][0]) + 1; ; j++ {
		if !has[j] && !has[j+1] && !has[j+2] {
			return j
		}
	}
}

func TestSealedBodyFlip(t *testing.T) {
	src, sizes, segs := damageTemplate(t)
	mid, lastSealed := segs[1], segs[len(segs)-2]
	cases := []struct {
		name string
		seg  segLayout
		j    int
	}{
		{"middle segment", mid, plainRecord(mid)},
		{"indexed record", mid, int(sparseEntries(mid.sizes, DefaultIndexIntervalBytes)[3][0])},
		{"first record", mid, 0},
		{"last sealed segment", lastSealed, plainRecord(lastSealed)},
	}
	for _, tc := range cases {
		for _, ro := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/readonly=%v", tc.name, ro), func(t *testing.T) {
				dir := copyDir(t, src)
				off := tc.seg.base + uint64(tc.j)
				pos := tc.seg.positions()[tc.j]
				name := segment.Name(tc.seg.base, ".log")
				patch(t, filepath.Join(dir, name), pos+headerSize+20, []byte{0xA5})
				open := Open
				if ro {
					open = OpenReadOnly
				}
				l, err := open(dir, Options{})
				if err != nil {
					t.Fatalf("open with a damaged sealed record: %v", err)
				}
				defer l.Close()
				_, err = l.Read(off)
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Read(%d): %v, want ErrCorrupt", off, err)
				}
				if msg := err.Error(); !strings.Contains(msg, name) || !strings.Contains(msg, fmt.Sprintf("position %d", pos)) {
					t.Fatalf("error %q does not name segment %s and position %d", msg, name, pos)
				}
				checkAllExcept(t, l, sizes, map[uint64]bool{off: true})
			})
		}
	}
}

// TestSealedLengthDamage damages the length field of a record in a sealed
// segment: that record is lost, the ones after it (up to and past the next
// index entry) must still read.
func TestSealedLengthDamage(t *testing.T) {
	src, sizes, segs := damageTemplate(t)
	s := segs[2]
	j := plainRecord(s)
	off, pos := s.base+uint64(j), s.positions()[j]
	length := uint32(sizes[off] - 4)
	cases := map[string]uint32{
		"huge":            length | 1<<30,
		"zero":            0,
		"below minimum":   11,
		"shorter by 1":    length - 1,
		"shorter by 9":    length - 9,
		"longer by 1":     length + 1,
		"longer by 40":    length + 40,
		"one more record": length + uint32(sizes[off+1]), // lands on the next record's successor
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, src)
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], v)
			patch(t, segPath(dir, s.base, ".log"), pos, b[:])
			for _, open := range []func(string, Options) (*Log, error){OpenReadOnly, Open} {
				l, err := open(dir, Options{})
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				checkAllExcept(t, l, sizes, map[uint64]bool{off: true})
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestAttrFlagDamage flips bit 31 of a length field (the attributes flag),
// which the version-1 format's checksum does not cover. The flag set over a
// body that cannot be a section is caught (a writer never writes an empty
// section); the other two flips give a record whose bytes all verify under
// the other reading, and no version-1 reader can tell (FORMAT.md, "Known
// limits"): the test pins down exactly what is served then, so that a
// change of behaviour is seen.
func TestAttrFlagDamage(t *testing.T) {
	unknownKey := append([]byte{0x00, 0x03, 0x08, 0x01, 'A'}, "rest of the body"...) // parses as a section with key 8 (unknown)
	records := []struct {
		name       string
		body       []byte
		attrs      *Attrs
		detectable bool
		served     []byte // the body a version-1 reader serves when it cannot detect the flip
	}{
		{"flag set, body starts with 00 00", testBody(1, 100), nil, true, nil},
		{"flag cleared on a record with attributes", testBody(2, 100), &Attrs{Group: []byte("g")}, false,
			append([]byte{0, 3, 2, 1, 'g'}, testBody(2, 100)...)},
		{"flag set, body parses as a section", unknownKey, nil, false, []byte("rest of the body")},
	}
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	for _, r := range records {
		if _, err := l.AppendWith(r.body, r.attrs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Append(make([]byte, 4000)); err != nil { // seals segment 0
		t.Fatal(err)
	}
	if n := len(logFiles(t, dir)); n != 2 {
		t.Fatalf("%d segments, want 2", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg := segPath(dir, 0, ".log")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	for i, pos := 0, int64(0); i < len(records); i++ {
		patch(t, seg, pos, []byte{data[pos] ^ 0x80})
		pos += int64(binary.BigEndian.Uint32(data[pos:])&(1<<31-1)) + 4
	}
	ro := mustOpenRO(t, dir, Options{})
	for i, want := range records {
		r, err := ro.Read(uint64(i))
		if want.detectable {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: Read: %v, want ErrCorrupt", want.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Read: %v; the flip is not detectable, the other reading verifies", want.name, err)
			continue
		}
		if !bytes.Equal(r.Body, want.served) {
			t.Errorf("%s: served body %q, want %q", want.name, r.Body, want.served)
		}
		r.Release()
	}
}

// TestTornTail writes what a crash mid-append can leave after the last
// record of the active segment.
func TestTornTail(t *testing.T) {
	src := t.TempDir()
	l := mustOpen(t, src, Options{SegmentBytes: damageSegBytes})
	sizes := appendN(t, l, 700, damageSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := layout(0, sizes, damageSegBytes)
	active := segs[len(segs)-1]
	end, next := active.bytes(), uint64(len(sizes))
	whole := func(id uint64) []byte { return record.Append(nil, id, nil, testBody(id, 100)) }
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]byte, 300)
	for i := range random {
		random[i] = byte(rng.UintN(255) + 1)
	}
	cases := map[string][]byte{
		"random bytes":   random,
		"partial record": whole(next)[:30],
		"wrong id":       whole(next + 3),
		"bad checksum":   func() []byte { b := whole(next); b[60] ^= 1; return b }(),
		"huge length":    append([]byte{0x7f, 0xff, 0xff, 0xff}, random[:40]...),
		"header only":    whole(next)[:headerSize],
	}
	for name, garbage := range cases {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, src)
			path := segPath(dir, active.base, ".log")
			patch(t, path, end, garbage)
			before := hashDir(t, dir)
			ro := mustOpenRO(t, dir, Options{})
			if ro.Next() != next || !ro.Recovery().Active.Cut {
				t.Fatalf("read-only open: Next %d Cut %v, want %d and a cut", ro.Next(), ro.Recovery().Active.Cut, next)
			}
			checkAll(t, ro, 0, sizes)
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
			if d := testkit.DiffHashes(before, hashDir(t, dir)); d != "" {
				t.Fatalf("read-only open changed the directory: %s", d)
			}

			l := mustOpen(t, dir, Options{})
			rep := l.Recovery()
			if l.Next() != next || !rep.Active.Cut || rep.Active.End != end || rep.Active.Next != next || rep.Active.CutReason == "" {
				t.Fatalf("Next %d, recovery %+v; want Next %d, a cut at %d", l.Next(), rep.Active, next, end)
			}
			if rep.TruncatedBytes < int64(len(garbage)) {
				t.Errorf("TruncatedBytes %d, the torn tail was %d bytes", rep.TruncatedBytes, len(garbage))
			}
			if _, err := l.Read(next); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Read(%d) past the cut: %v", next, err)
			}
			checkAll(t, l, 0, sizes)
			if off, err := l.AppendWith(testBody(next, 100), nil); err != nil || off != next {
				t.Fatalf("Append after the cut: %d, %v", off, err)
			}
			checkRead(t, l, next, 100)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			newEnd := end + int64(len(whole(next)))
			if !bytes.Equal(data[end:newEnd], whole(next)) || !testkit.AllZero(data[newEnd:]) {
				t.Fatalf("after the new record the active file is not zero")
			}
			l = mustOpen(t, dir, Options{})
			if l.Next() != next+1 || l.Recovery().Active.Cut {
				t.Fatalf("second reopen: Next %d, cut %v", l.Next(), l.Recovery().Active.Cut)
			}
			checkAll(t, l, 0, append(sizes, headerSize+100))
		})
	}
}

func TestForeignFilesIgnored(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	sizes := appendN(t, l, 100, mixedSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	foreign := []string{"notes.txt", "123.log", "0000000000000000000x.log", "00000000000000000000.log.tmp",
		"000000000000000000000.log", "00000000000000000000.idx", "99999999999999999999.log"}
	for _, name := range foreign {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("not a segment"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "00000000000000009999.log"), 0o700); err != nil {
		t.Fatal(err)
	}
	before := hashDir(t, dir)
	checkAll(t, mustOpenRO(t, dir, Options{}), 0, sizes)
	l = mustOpen(t, dir, Options{})
	checkAll(t, l, 0, sizes)
	if off, err := l.Append(nil); err != nil || off != 100 {
		t.Fatalf("Append: %d, %v", off, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	after := hashDir(t, dir)
	for _, name := range foreign {
		if after[name] != before[name] {
			t.Errorf("foreign file %s was changed or removed", name)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "00000000000000009999.log")); err != nil || !st.IsDir() {
		t.Errorf("foreign directory: %v", err)
	}
}

func TestEmptyActiveSegmentFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(segPath(dir, 500, ".log"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ro := mustOpenRO(t, dir, Options{})
	if ro.First() != 500 || ro.Next() != 500 {
		t.Fatalf("read-only: First %d Next %d, want 500", ro.First(), ro.Next())
	}
	if _, err := ro.Read(500); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read of an empty log: %v", err)
	}
	l := mustOpen(t, dir, Options{})
	if l.Next() != 500 {
		t.Fatalf("Next %d, want 500", l.Next())
	}
	if off, err := l.Append([]byte("x")); err != nil || off != 500 {
		t.Fatalf("Append: %d, %v", off, err)
	}
}

// TestCrashDuringRoll leaves what a crash between creating the next segment
// and trimming the old one leaves: an empty newest file and an untrimmed
// previous one.
func TestCrashDuringRoll(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 8192})
	sizes := appendN(t, l, 200, mixedSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := layout(0, sizes, 8192)
	old := segs[len(segs)-1]
	if err := os.WriteFile(segPath(dir, 200, ".log"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before := hashDir(t, dir)
	checkAll(t, mustOpenRO(t, dir, Options{}), 0, sizes)
	if d := testkit.DiffHashes(before, hashDir(t, dir)); d != "" {
		t.Fatalf("read-only open changed the directory: %s", d)
	}
	l = mustOpen(t, dir, Options{})
	if l.Next() != 200 {
		t.Fatalf("Next %d, want 200", l.Next())
	}
	checkAll(t, l, 0, sizes)
	st, err := os.Stat(segPath(dir, old.base, ".log"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != old.bytes() {
		t.Fatalf("untrimmed segment is %d bytes after open, its records %d", st.Size(), old.bytes())
	}
	if rs := l.Recovery().Sealed; len(rs) != 1 || rs[0].ZeroedBytes == 0 {
		t.Fatalf("Recovery().Sealed = %+v, want the trim reported", rs)
	}
	if off, err := l.Append(testBody(200, 10)); err != nil || off != 200 {
		t.Fatalf("Append: %d, %v", off, err)
	}
	checkAll(t, l, 0, append(sizes, headerSize+10))
}

// TestRenamedSegment renames segment files so that a name no longer matches
// the first record's id. Read-only opens open and report it; a writable
// open refuses a misnamed active segment (appending after it would reuse
// its offsets) and opens around a misnamed sealed one; no record is ever
// served under a wrong offset, and nothing panics. Recover renames every
// one of them back, and the log is whole again.
func TestRenamedSegment(t *testing.T) {
	src, sizes, segs := damageTemplate(t)
	rename := func(t *testing.T, dir string, from, to uint64) {
		for _, suf := range []string{".log", ".index", ".timeindex"} {
			if err := os.Rename(segPath(dir, from, suf), segPath(dir, to, suf)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := map[string]struct{ from, to uint64 }{
		"sealed forward":  {segs[1].base, segs[1].base + 7},
		"sealed backward": {segs[2].base, segs[2].base - 7},
		"first":           {0, 3},
		"active":          {segs[len(segs)-1].base, segs[len(segs)-1].base + 5},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, src)
			rename(t, dir, c.from, c.to)
			for _, open := range []func(string, Options) (*Log, error){OpenReadOnly, Open} {
				l, err := open(dir, Options{})
				if err != nil {
					if name != "active" || !errors.Is(err, ErrMisnamed) || !errors.Is(err, ErrCorrupt) {
						t.Fatalf("open: %v", err)
					}
					continue
				}
				for off := l.First(); off < l.Next(); off++ {
					r, err := l.Read(off)
					if err != nil {
						if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) {
							t.Fatalf("Read(%d): %v", off, err)
						}
						continue
					}
					if off >= uint64(len(sizes)) || !bytes.Equal(r.Body, testBody(off, sizes[off]-headerSize)) {
						t.Fatalf("Read(%d) served another record", off)
					}
					r.Release()
				}
				for r, err := range l.Records(0) {
					if err == nil && (r.Offset >= uint64(len(sizes)) || !bytes.Equal(r.Body, testBody(r.Offset, sizes[r.Offset]-headerSize))) {
						t.Fatalf("Records served another record as %d", r.Offset)
					}
				}
				if l.readOnly {
					v, err := l.Verify(nil)
					if err != nil || v.Healthy() {
						t.Fatalf("Verify of a log with a renamed segment: healthy %v, %v", v.Healthy(), err)
					}
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := Recover(dir, Options{}, RecoverOptions{})
			if err != nil || len(rep.Renamed) != 1 || !rep.After.Healthy() {
				t.Fatalf("Recover: renamed %q, after %+v, %v", rep.Renamed, rep.After, err)
			}
			l := mustOpenRO(t, dir, Options{})
			checkAll(t, l, 0, sizes)
		})
	}
}
