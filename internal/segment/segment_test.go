package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/internal/record"
)

func testConfig(t *testing.T, segBytes int64, interval int) *Config {
	t.Helper()
	ml := record.MaxLength(4096)
	return &Config{Dir: t.TempDir(), SegmentBytes: segBytes, IndexInterval: interval, MaxLength: ml, MaxRecord: int(ml) + 4}
}

func body(id uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(id*7 + uint64(i)*31 + id>>8)
	}
	if n >= 8 {
		binary.BigEndian.PutUint64(b, id)
	}
	return b
}

func bodyLen(id uint64) int { return int(id * 2654435761 % 300) }

// written is what a test appended to a segment.
type written struct {
	base  uint64
	pos   []int64
	sizes []int
}

func (w written) entries(interval int) [][2]uint32 {
	var out [][2]uint32
	count := 0
	for i, r := range w.sizes {
		if count > interval {
			out = append(out, [2]uint32{uint32(i), uint32(w.pos[i])})
			count = 0
		}
		count += r
	}
	return out
}

// fill appends records to s while they fit under the roll rule.
func fill(t *testing.T, s *Segment) written {
	t.Helper()
	w := written{base: s.Base()}
	for id := s.Base(); ; id++ {
		b := body(id, bodyLen(id))
		size := record.Size(len(b), nil)
		if !s.Room(size) {
			if s.End() == 0 || s.End()+int64(size) <= s.cfg.SegmentBytes {
				t.Fatalf("Room(%d) false at position %d", size, s.End())
			}
			return w
		}
		got, pos, err := s.Append(nil, b)
		if err != nil || got != id || pos != s.End()-int64(size) {
			t.Fatalf("Append: id %d pos %d %v; want id %d", got, pos, err, id)
		}
		w.pos, w.sizes = append(w.pos, pos), append(w.sizes, size)
	}
}

func checkReads(t *testing.T, s *Segment, w written) {
	t.Helper()
	for i := range w.sizes {
		id := w.base + uint64(i)
		v, pos, err := s.Read(id)
		if err != nil {
			t.Fatalf("Read(%d): %v", id, err)
		}
		if pos != w.pos[i] || v.ID != id || !bytes.Equal(v.Body, body(id, bodyLen(id))) {
			t.Fatalf("Read(%d): id %d at %d, want at %d (or body differs)", id, v.ID, pos, w.pos[i])
		}
	}
	next := w.base + uint64(len(w.sizes))
	for _, id := range []uint64{w.base - 1, next, next + 100} {
		if _, _, err := s.Read(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Read(%d) outside the segment: %v, want ErrNotFound", id, err)
		}
	}
}

func TestName(t *testing.T) {
	if got := Name(1245036, LogSuffix); got != "00000000000001245036.log" {
		t.Fatalf("Name = %q", got)
	}
	for _, base := range []uint64{0, 1, 1245036, 1<<63 + 5, 1<<64 - 1} {
		for _, suf := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix} {
			name := Name(base, suf)
			if len(name) != 20+len(suf) {
				t.Fatalf("Name(%d, %s) = %q", base, suf, name)
			}
			b, s, ok := ParseName(name)
			if !ok || b != base || s != suf {
				t.Fatalf("ParseName(%q) = %d, %q, %v", name, b, s, ok)
			}
			if _, _, ok := ParseName(filepath.Join("some", "dir", name)); !ok {
				t.Fatalf("ParseName of a path ending in %q failed", name)
			}
		}
	}
	if Name(9, LogSuffix) >= Name(10, LogSuffix) || Name(99999, LogSuffix) >= Name(100000, LogSuffix) {
		t.Fatal("name order is not numeric order")
	}
}

func TestParseNameRejects(t *testing.T) {
	for _, name := range []string{
		"", ".log", "123.log", "0000000000000000000.log", "000000000000000000000.log",
		"0000000000000000000a.log", "-0000000000000000001.log", "+0000000000000000001.log",
		"00000000000000000000.txt", "00000000000000000000.log.tmp", "00000000000000000000.index.tmp",
		"00000000000000000000", "00000000000000000000.LOG", "99999999999999999999.log",
		"18446744073709551616.log", " 0000000000000000000.log",
	} {
		if b, s, ok := ParseName(name); ok {
			t.Errorf("ParseName(%q) = %d, %q, true; want false", name, b, s)
		}
	}
	if b, _, ok := ParseName("18446744073709551615.log"); !ok || b != 1<<64-1 {
		t.Errorf("ParseName of the largest offset: %d, %v", b, ok)
	}
}

func TestCreateAppendSeal(t *testing.T) {
	cfg := testConfig(t, 8192, 256)
	s, err := Create(cfg, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if s.Base() != 1000 || s.Next() != 1000 || s.End() != 0 || !s.Active() {
		t.Fatalf("new segment: base %d next %d end %d", s.Base(), s.Next(), s.End())
	}
	if _, err := Create(cfg, 1000); err == nil {
		t.Fatal("Create over an existing segment succeeded")
	}
	w := fill(t, s)
	if len(w.sizes) < 20 {
		t.Fatalf("only %d records", len(w.sizes))
	}
	checkReads(t, s, w)
	end, next := s.End(), s.Next()
	if err := s.Seal(false); err != nil {
		t.Fatal(err)
	}
	if s.Active() || s.End() != end || s.Next() != next {
		t.Fatal("Seal changed the segment's end")
	}
	checkReads(t, s, w)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkSealedFiles(t, cfg, w)

	r, err := OpenSealed(cfg, 1000, next)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	checkReads(t, r, w)
	if rep := r.CheckIndex(); rep.IndexRepaired {
		t.Fatalf("a clean index was repaired: %+v", rep)
	}
}

func checkSealedFiles(t *testing.T, cfg *Config, w written) {
	t.Helper()
	read := func(suffix string) []byte {
		b, err := os.ReadFile(filepath.Join(cfg.Dir, Name(w.base, suffix)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var total int64
	for _, n := range w.sizes {
		total += int64(n)
	}
	if got := int64(len(read(LogSuffix))); got != total {
		t.Fatalf("sealed .log is %d bytes, its records %d", got, total)
	}
	es := w.entries(cfg.IndexInterval)
	var want []byte
	for _, e := range es {
		want = binary.BigEndian.AppendUint32(want, e[0])
		want = binary.BigEndian.AppendUint32(want, e[1])
	}
	if len(es) == 0 || !bytes.Equal(read(IndexSuffix), want) {
		t.Fatalf(".index differs from the %d entries of the sparse rule", len(es))
	}
	tb := read(TimeIndexSuffix)
	if len(tb) != 12*len(es) {
		t.Fatalf(".timeindex is %d bytes, want %d", len(tb), 12*len(es))
	}
	for i, e := range es {
		if rel := binary.BigEndian.Uint32(tb[12*i+8:]); rel != e[0] {
			t.Fatalf("time entry %d: rel %d, want %d", i, rel, e[0])
		}
	}
}

func TestRoom(t *testing.T) {
	cfg := testConfig(t, 1000, 256)
	s, err := Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	capacity := cfg.capacity()
	if capacity != int64(cfg.MaxRecord) {
		t.Fatalf("capacity %d, want MaxRecord %d", capacity, cfg.MaxRecord)
	}
	// Empty: anything up to the capacity fits, SegmentBytes or not.
	if !s.Room(16) || !s.Room(3000) || !s.Room(int(capacity)) || s.Room(int(capacity)+1) {
		t.Fatal("Room of an empty segment")
	}
	if _, _, err := s.Append(nil, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if left := 1000 - 116; !s.Room(left) || s.Room(left+1) {
		t.Fatalf("Room at position 116: %v %v", s.Room(left), s.Room(left+1))
	}
	// A record bigger than SegmentBytes goes alone.
	big, err := Create(cfg, 50)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	if _, _, err := big.Append(nil, make([]byte, 3000)); err != nil {
		t.Fatal(err)
	}
	if big.Room(16) {
		t.Fatal("a segment past SegmentBytes has room for more")
	}
}

// TestReadDamagedIndexEntry damages one entry in the middle of a sealed
// segment's index; every record must still read.
func TestReadDamagedIndexEntry(t *testing.T) {
	cases := map[string]func(e [][2]uint32, w written){
		"pos+1":          func(e [][2]uint32, w written) { e[2][1]++ },
		"pos of next":    func(e [][2]uint32, w written) { e[2][1] = uint32(w.pos[e[2][0]+1]) },
		"rel+1":          func(e [][2]uint32, w written) { e[2][0]++ },
		"pos past end":   func(e [][2]uint32, w written) { e[2][1] = 1 << 30 },
		"rel of last":    func(e [][2]uint32, w written) { e[len(e)-1][0] = uint32(len(w.sizes) + 10) },
		"zero in middle": func(e [][2]uint32, w written) { e[2] = [2]uint32{} },
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, 16<<10, 256)
			s, err := Create(cfg, 7)
			if err != nil {
				t.Fatal(err)
			}
			w := fill(t, s)
			next := s.Next()
			if err := s.Seal(false); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			es := w.entries(cfg.IndexInterval)
			damage(es, w)
			var b []byte
			for _, e := range es {
				b = binary.BigEndian.AppendUint32(b, e[0])
				b = binary.BigEndian.AppendUint32(b, e[1])
			}
			if err := os.WriteFile(filepath.Join(cfg.Dir, Name(7, IndexSuffix)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := OpenSealed(cfg, 7, next)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			checkReads(t, r, w)
		})
	}
}

func TestScanner(t *testing.T) {
	cfg := testConfig(t, 16<<10, 256)
	s, err := Create(cfg, 100)
	if err != nil {
		t.Fatal(err)
	}
	w := fill(t, s)
	n := uint64(len(w.sizes))
	scan := func(s *Segment, from uint64, bad uint64) {
		t.Helper()
		sc := s.Scan(from)
		for id := from; id < 100+n; id++ {
			v, pos, err := sc.Next()
			if id == bad {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Scan: damaged record %d: %v", id, err)
				}
				continue
			}
			if err != nil || v.ID != id || pos != w.pos[id-100] || !bytes.Equal(v.Body, body(id, bodyLen(id))) {
				t.Fatalf("Scan from %d: at %d got id %d pos %d, %v", from, id, v.ID, pos, err)
			}
		}
		if _, _, err := sc.Next(); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Scan past the end: %v", err)
		}
	}
	for _, from := range []uint64{100, 101, 100 + n/2, 100 + n - 1, 100 + n} {
		scan(s, from, 0)
	}
	next := s.Next()
	if err := s.Seal(false); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	bad := uint64(100 + n/3)
	f, err := os.OpenFile(filepath.Join(cfg.Dir, Name(100, LogSuffix)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xEE}, w.pos[bad-100]+record.HeaderSize+3); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	r, err := OpenSealed(cfg, 100, next)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	scan(r, 100, bad)
	scan(r, bad, bad)
}

// TestOpenActiveRecovery cuts a torn tail of an active segment and appends
// after it.
func TestOpenActiveRecovery(t *testing.T) {
	cfg := testConfig(t, 16<<10, 256)
	s, err := Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	for id := range uint64(30) {
		if _, _, err := s.Append(nil, body(id, bodyLen(id))); err != nil {
			t.Fatal(err)
		}
	}
	end := s.End()
	_ = s.Close()
	path := filepath.Join(cfg.Dir, Name(0, LogSuffix))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := record.Append(nil, 30, nil, body(30, 200))[:100]
	if _, err := f.WriteAt(torn, end); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	a, rep, err := OpenActive(cfg, 0, Hint{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Cut || rep.End != end || rep.Next != 30 || a.Next() != 30 || a.End() != end {
		t.Fatalf("recovery %+v, want a cut at %d", rep, end)
	}
	if id, pos, err := a.Append(nil, []byte("after")); err != nil || id != 30 || pos != end {
		t.Fatalf("Append after recovery: %d at %d, %v", id, pos, err)
	}
	if v, _, err := a.Read(30); err != nil || string(v.Body) != "after" {
		t.Fatalf("Read(30): %q, %v", v.Body, err)
	}
	newEnd := a.End()
	_ = a.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range data[newEnd:] {
		if c != 0 {
			t.Fatalf("byte %d after the end is %#x", newEnd+int64(i), c)
		}
	}
}

func TestOpenActiveWrongName(t *testing.T) {
	cfg := testConfig(t, 16<<10, 256)
	s, err := Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Append(nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	for _, suf := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix} {
		if err := os.Rename(filepath.Join(cfg.Dir, Name(0, suf)), filepath.Join(cfg.Dir, Name(5, suf))); err != nil {
			t.Fatal(err)
		}
	}
	for _, ro := range []bool{false, true} {
		c := *cfg
		c.ReadOnly = ro
		if a, _, err := OpenActive(&c, 5, Hint{}); !errors.Is(err, ErrCorrupt) {
			if err == nil {
				_ = a.Close()
			}
			t.Fatalf("OpenActive(read-only %v) of a renamed segment: %v, want ErrCorrupt", ro, err)
		}
	}
}

// TestDroppedSegmentWritesNoIndexFiles: a reader's first lookup of a
// lazily opened sealed segment checks its index, and rebuilds it when the
// files fall short. When the log dropped the segment meanwhile (its files
// removed, the reader's mapping still serving it), the rebuilt index stays
// in memory: no index file comes back beside a .log that is gone.
func TestDroppedSegmentWritesNoIndexFiles(t *testing.T) {
	cfg := testConfig(t, 8192, 256)
	s, err := Create(cfg, 1000)
	if err != nil {
		t.Fatal(err)
	}
	w := fill(t, s)
	next := s.Next()
	if err := s.Seal(false); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if err := os.Remove(filepath.Join(cfg.Dir, Name(1000, IndexSuffix))); err != nil {
		t.Fatal(err)
	}
	r, err := OpenSealed(cfg, 1000, next)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.Acquire() {
		t.Fatal("Acquire of a sealed segment failed")
	}
	defer r.Release()
	r.MarkDropped()
	for _, suffix := range []string{TimeIndexSuffix, IndexSuffix, LogSuffix} {
		_ = os.Remove(filepath.Join(cfg.Dir, Name(1000, suffix)))
	}
	checkReads(t, r, w) // the first lookup: the index is rebuilt
	if _, _, err := r.Read(w.base + uint64(len(w.sizes)) - 1); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("%s is in the directory after the segment was dropped", e.Name())
	}
}
