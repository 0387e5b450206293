package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/testkit"
)

// crashTornOptions: small segments and a dense index, so that the active
// segment's index has entries pointing at the records damaged, and small
// files to copy for every case.
func crashTornOptions() Options {
	return Options{SegmentBytes: 4096, IndexIntervalBytes: 256, MaxRecordBytes: 1024, Sync: SyncNone}
}

// crashTornLog is the pristine log the cases damage copies of.
type crashTornLog struct {
	dir     string
	active  string // path of the active segment's .log
	bodies  map[uint64][]byte
	attrs   map[uint64]*Attrs
	pos     []int64 // byte position of each record of the active segment
	size    []int64 // and its size
	ids     []uint64
	next    uint64
	content []byte // the active .log file
}

// crashBuildTornLog writes a log of three sealed segments and an active one
// of seven records, the last three of them an empty body, a record with
// attributes and a 300-byte body, and closes it cleanly.
func crashBuildTornLog(t *testing.T, dir string) *crashTornLog {
	t.Helper()
	l, err := Open(dir, crashTornOptions())
	if err != nil {
		t.Fatal(err)
	}
	p := &crashTornLog{dir: dir, bodies: map[uint64][]byte{}, attrs: map[uint64]*Attrs{}}
	add := func(body []byte, a *Attrs) {
		off, err := l.AppendWith(body, a)
		if err != nil {
			t.Fatal(err)
		}
		p.bodies[off], p.attrs[off] = body, a
	}
	for off := uint64(0); len(*l.segs.Load()) < 4; off++ {
		add(crashBody(off, 7, 150, 500), nil)
	}
	for off := l.Next(); l.Next()-l.active.Base() < 4; off++ {
		add(crashBody(off, 7, 20, 200), nil)
	}
	add(nil, nil)
	add(crashBody(l.Next(), 7, 37, 37), &Attrs{Group: []byte("g-17"), Due: 1_700_000_000_123, HasDue: true})
	add(crashBody(l.Next(), 7, 300, 300), nil)
	if len(*l.segs.Load()) != 4 || l.Next()-l.active.Base() < 5 {
		t.Fatalf("layout: %d segments, %d records in the active one", len(*l.segs.Load()), l.Next()-l.active.Base())
	}
	for ri := range l.Inspect(l.active.Base()) {
		if !ri.OK {
			t.Fatalf("pristine record %d: %v", ri.Offset, ri.Err)
		}
		p.ids = append(p.ids, ri.Offset)
		p.pos = append(p.pos, ri.Position)
		p.size = append(p.size, ri.Size)
	}
	p.active, p.next = l.active.Path(), l.Next()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if p.content, err = os.ReadFile(p.active); err != nil {
		t.Fatal(err)
	}
	return p
}

// crashTornCase is one way to damage the active segment, at record i of the
// active segment and byte b of the file.
type crashTornCase struct {
	name    string
	corrupt func(t *testing.T, path string, content []byte, start, b int64)
	// cut tells whether recovery must report a cut: bytes were damaged,
	// rather than cleanly zero from a record boundary on.
	cut func(content []byte, start, b int64) bool
}

func crashTornCases(seed uint64) []crashTornCase {
	nonZeroBefore := func(content []byte, start, b int64) bool { return !testkit.AllZero(content[start:b]) }
	return []crashTornCase{
		{
			name: "zero to the end",
			corrupt: func(t *testing.T, path string, content []byte, _, b int64) {
				crashPatch(t, path, b, make([]byte, int64(len(content))-b))
			},
			cut: nonZeroBefore,
		},
		{
			name: "random bytes",
			corrupt: func(t *testing.T, path string, content []byte, start, b int64) {
				crashPatch(t, path, b, crashGarbage(seed, content, start, b, 200+int(b%200)))
			},
			cut: func([]byte, int64, int64) bool { return true },
		},
		{
			name: "truncated",
			corrupt: func(t *testing.T, path string, _ []byte, _, b int64) {
				if err := os.Truncate(path, b); err != nil {
					t.Fatal(err)
				}
			},
			cut: nonZeroBefore,
		},
	}
}

// crashGarbage returns n pseudo-random bytes to write at b, inside the
// record at start: the first one differs from the byte there, so that the
// record is damaged, and the record's length field never reads as zero (an
// end marker followed by garbage is a case of its own, in
// TestCrashTornTailUnwrittenLength).
func crashGarbage(seed uint64, content []byte, start, b int64, n int) []byte {
	g := crashBody(uint64(b), seed, n, n)
	if g[0] == content[b] {
		g[0] ^= 0xff
	}
	if b < start+4 {
		length := append(append([]byte(nil), content[start:b]...), g[:start+4-b]...)
		if testkit.AllZero(length) {
			g[start+3-b] = 1 // a short length: damage, not an end
			if g[0] == content[b] {
				g[0] ^= 0x80
			}
		}
	}
	return g
}

func crashPatch(t *testing.T, path string, at int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(b, at)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestCrashTornTail damages the tail of the active segment at every byte of
// each of its last three records, three ways (zeros to the end, a few
// hundred random bytes, a truncated file), on a fresh copy of a pristine
// log, and checks that Open keeps exactly the records before the damaged
// one, says whether it cut, appends at the cut and leaves nothing but zeros
// after the new end. The pristine log was closed cleanly; its clean-close
// marker is removed so that recovery walks, and kept in a second pass
// (damage in the last record: its header bytes and a sample of the rest)
// to see that a marker is not trusted once the tail changed.
func TestCrashTornTail(t *testing.T) {
	seed := crashSeedFor(t) // the random bytes of the garbage case
	scratch := crashScratchDir(t)
	p := crashBuildTornLog(t, filepath.Join(scratch, "pristine"))
	n := len(p.ids)
	cases, cuts := 0, 0
	for _, tc := range crashTornCases(seed) {
		for i := n - 3; i < n; i++ {
			for _, marker := range []bool{false, true} {
				if marker && i != n-1 {
					continue
				}
				name := fmt.Sprintf("%s/record %d", tc.name, p.ids[i])
				if marker {
					name += "/with clean marker"
				}
				t.Run(name, func(t *testing.T) {
					for b := p.pos[i]; b < p.pos[i]+p.size[i]; b++ {
						// With the marker, the header's bytes and a sample
						// of the rest.
						if k := b - p.pos[i]; marker && k >= record.HeaderSize+4 && k%13 != 0 && k != p.size[i]-1 {
							continue
						}
						cut := tc.cut(p.content, p.pos[i], b)
						crashTornRun(t, scratch, p, i, marker, cut, func(path string) { tc.corrupt(t, path, p.content, p.pos[i], b) },
							fmt.Sprintf("byte %d (record %d at %d, %d bytes)", b, p.ids[i], p.pos[i], p.size[i]))
						cases++
						if cut {
							cuts++
						}
					}
				})
			}
		}
	}
	t.Logf("%d cases, %d of them with a cut expected", cases, cuts)
	if cuts == 0 || cuts == cases {
		t.Fatalf("%d cases, %d of them with a cut expected: the damage no longer reaches both kinds of case", cases, cuts)
	}

	// The control: an untouched copy opens from its marker, walking nothing.
	dir := filepath.Join(scratch, "control")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	testkit.MustCopyDir(t, p.dir, dir, false)
	l, err := Open(dir, crashTornOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if rec := l.Recovery(); !rec.Clean || l.Next() != p.next {
		t.Fatalf("untouched copy with its clean-close marker: Next %d (want %d), recovery %+v", l.Next(), p.next, rec.Active)
	}
}

// crashTornRun copies the pristine log, damages it, reopens it and checks
// that it holds exactly the records before record i.
func crashTornRun(t *testing.T, scratch string, p *crashTornLog, i int, marker, wantCut bool, corrupt func(path string), what string) {
	t.Helper()
	dir, err := os.MkdirTemp(scratch, "case")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	testkit.MustCopyDir(t, p.dir, dir, false)
	if !marker {
		if err := os.Remove(filepath.Join(dir, cleanName)); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, filepath.Base(p.active))
	corrupt(path)

	l, err := Open(dir, crashTornOptions())
	if err != nil {
		t.Fatalf("%s: Open: %v", what, err)
	}
	defer l.Close()
	rec := l.Recovery()
	want := p.ids[i]
	// The marker says the log reached the pristine end: those offsets were
	// given out, so a new record never takes one of them (what the tail
	// lost is a missing range).
	next := want
	if marker {
		next = p.ids[len(p.ids)-1] + 1
	}
	switch {
	case l.Next() != next:
		t.Fatalf("%s: Next %d, want %d (recovery %+v)", what, l.Next(), next, rec.Active)
	case rec.Active.Cut != wantCut:
		t.Fatalf("%s: recovery says cut %v, want %v (recovery %+v)", what, rec.Active.Cut, wantCut, rec.Active)
	case rec.Active.Cut && (rec.TruncatedBytes <= 0 || rec.Active.CutReason == ""):
		t.Fatalf("%s: a cut of %d bytes, reason %q", what, rec.TruncatedBytes, rec.Active.CutReason)
	case marker && (rec.Clean || rec.Active.CleanMismatch == ""):
		t.Fatalf("%s: the clean-close marker was trusted after the tail changed (recovery %+v)", what, rec.Active)
	case len(rec.Active.Damaged) > 0:
		t.Fatalf("%s: damage reported in a torn tail: %+v", what, rec.Active.Damaged)
	}
	for off := l.First(); off < want; off++ {
		crashTornCheck(t, l, p, off, what)
	}
	body := []byte("after the cut")
	off, err := l.Append(body)
	if err != nil || off != next {
		t.Fatalf("%s: Append after recovery: %d, %v; want %d", what, off, err, next)
	}
	p2 := *p
	p2.bodies = map[uint64][]byte{off: body}
	p2.attrs = map[uint64]*Attrs{}
	crashTornCheck(t, l, &p2, off, what+", the record appended after the cut")
	rep, err := l.Verify(nil)
	if err != nil || rep.Damaged != 0 || rep.Missing != next-want || len(rep.IndexProblems) != 0 {
		t.Fatalf("%s: Verify: %v, %d damaged, first %+v, %d missing (want %d), index problems %q",
			what, err, rep.Damaged, rep.FirstDamage, rep.Missing, next-want, rep.IndexProblems)
	}
	if next != want {
		return // the append went to a new segment
	}
	end := l.active.End()
	if err := l.Close(); err != nil {
		t.Fatalf("%s: Close: %v", what, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if end != p.pos[i]+int64(record.Size(len(body), nil)) {
		t.Fatalf("%s: the append ends at %d, want %d", what, end, p.pos[i]+int64(record.Size(len(body), nil)))
	}
	if k := bytes.IndexFunc(b[end:], func(r rune) bool { return r != 0 }); k >= 0 {
		t.Fatalf("%s: byte %d past the new end %d is not zero: the old tail was not cleared", what, end+int64(k), end)
	}
}

// crashTornCheck reads the record at off and compares it with the pristine
// log's (body and attributes).
func crashTornCheck(t *testing.T, l *Log, p *crashTornLog, off uint64, what string) {
	t.Helper()
	r, err := l.Read(off)
	if err != nil {
		t.Fatalf("%s: Read(%d): %v", what, off, err)
	}
	defer r.Release()
	if !bytes.Equal(r.Body, p.bodies[off]) {
		t.Fatalf("%s: Read(%d): body of %d bytes differs from the %d appended", what, off, len(r.Body), len(p.bodies[off]))
	}
	a, err := r.Attrs()
	if err != nil {
		t.Fatalf("%s: Read(%d).Attrs: %v", what, off, err)
	}
	w := p.attrs[off]
	if w == nil {
		w = &Attrs{}
	}
	if !bytes.Equal(a.Group, w.Group) || a.HasDue != w.HasDue || a.Due != w.Due {
		t.Fatalf("%s: Read(%d).Attrs: %+v, appended %+v", what, off, a, *w)
	}
}

// TestCrashTornTailUnwrittenLength: a record's bytes are written before its
// length field (record.Encode), so the tail a crash leaves most often is a
// zero length field followed by the body of the record that was being
// written. Recovery must end the log there and say that it cut a torn tail:
// non-zero bytes past the end are not the clean end of a preallocated file.
func TestCrashTornTailUnwrittenLength(t *testing.T) {
	scratch := crashScratchDir(t)
	p := crashBuildTornLog(t, filepath.Join(scratch, "pristine"))
	n := len(p.ids)
	for i := n - 3; i < n; i++ {
		t.Run(fmt.Sprintf("record %d", p.ids[i]), func(t *testing.T) {
			// The records after i are cleared, as if i had been the last
			// one, being written when the process died.
			crashTornRun(t, scratch, p, i, false, true, func(path string) {
				tail := make([]byte, int64(len(p.content))-p.pos[i])
				copy(tail[4:], p.content[p.pos[i]+4:p.pos[i]+p.size[i]])
				crashPatch(t, path, p.pos[i], tail)
			}, fmt.Sprintf("length field of record %d zero, its %d other bytes present", p.ids[i], p.size[i]-4))
		})
	}
}

// TestCrashTornTailFullSegment: an active segment whose records end 1, 2 or
// 3 bytes before the end of its file (it is full: the next record rolls)
// has a clean end; recovery must not report a cut.
func TestCrashTornTailFullSegment(t *testing.T) {
	scratch := crashScratchDir(t)
	opts := crashTornOptions()
	for short := int64(0); short <= 4; short++ {
		t.Run(fmt.Sprintf("%d bytes short", short), func(t *testing.T) {
			dir := filepath.Join(scratch, fmt.Sprintf("short%d", short))
			l, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			// Fill the first segment to SegmentBytes-short exactly.
			for l.active.End()+2*record.HeaderSize+100 < opts.SegmentBytes-short {
				if _, err := l.Append(make([]byte, 100)); err != nil {
					t.Fatal(err)
				}
			}
			last := opts.SegmentBytes - short - l.active.End() - record.HeaderSize
			if _, err := l.Append(bytes.Repeat([]byte{'x'}, int(last))); err != nil {
				t.Fatal(err)
			}
			if l.active.End() != opts.SegmentBytes-short || len(*l.segs.Load()) != 1 {
				t.Fatalf("filled to %d in %d segments", l.active.End(), len(*l.segs.Load()))
			}
			next := l.Next()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, cleanName)); err != nil {
				t.Fatal(err)
			}
			l, err = Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			rec := l.Recovery().Active
			if l.Next() != next || rec.Cut || rec.TornBytes != 0 {
				t.Fatalf("segment full to %d of %d bytes: Next %d (want %d), cut %v (%q), %d torn bytes; want no cut",
					opts.SegmentBytes-short, opts.SegmentBytes, l.Next(), next, rec.Cut, rec.CutReason, rec.TornBytes)
			}
			if off, err := l.Append([]byte("next")); err != nil || off != next {
				t.Fatalf("Append: %d, %v; want %d", off, err, next)
			}
			if len(*l.segs.Load()) != 2 {
				t.Fatalf("%d segments after appending to a full one, want 2", len(*l.segs.Load()))
			}
		})
	}
}
