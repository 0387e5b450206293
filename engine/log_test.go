package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// Helpers shared by the engine tests.

// testBody is the deterministic body of the record at off: the offset
// (big-endian, when there is room for it) then bytes derived from it, so a
// record served under the wrong offset never compares equal.
func testBody(off uint64, n int) []byte {
	b := make([]byte, n)
	var h [8]byte
	binary.BigEndian.PutUint64(h[:], off)
	for i := range b {
		if i < 8 {
			b[i] = h[i]
			continue
		}
		b[i] = byte(uint64(i)*131 + off*7 + off>>8)
	}
	return b
}

// mixedSize is a deterministic body size for offset off: mostly small, some
// empty, some of a few KiB.
func mixedSize(off uint64) int {
	x := (off + 1) * 0x9E3779B97F4A7C15
	x ^= x >> 29
	switch x % 10 {
	case 0:
		return 0
	case 1, 2, 3:
		return int(x >> 8 % 64)
	case 9:
		return int(x >> 8 % 6000)
	}
	return int(x >> 8 % 700)
}

const headerSize = 16 // length + checksum + id

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustOpenRO(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := OpenReadOnly(dir, opts)
	if err != nil {
		t.Fatalf("OpenReadOnly(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// appendN appends n records with bodies testBody(off, size(off)) and returns
// their whole record sizes.
func appendN(t testing.TB, l *Log, n int, size func(uint64) int) []int {
	t.Helper()
	sizes := make([]int, 0, n)
	for range n {
		want := l.Next()
		body := testBody(want, size(want))
		off, err := l.Append(body)
		if err != nil || off != want {
			t.Fatalf("Append: offset %d, %v; want offset %d", off, err, want)
		}
		sizes = append(sizes, headerSize+len(body))
	}
	return sizes
}

// checkRead reads off and compares its body with testBody(off, n).
func checkRead(t testing.TB, l *Log, off uint64, n int) {
	t.Helper()
	r, err := l.Read(off)
	if err != nil {
		t.Fatalf("Read(%d): %v", off, err)
	}
	defer r.Release()
	if r.Offset != off || !bytes.Equal(r.Body, testBody(off, n)) {
		t.Fatalf("Read(%d): offset %d, body of %d bytes differs from the %d appended", off, r.Offset, len(r.Body), n)
	}
}

// checkAll reads every record of sizes (whole record sizes, from first) with
// Read and with Records.
func checkAll(t testing.TB, l *Log, first uint64, sizes []int) {
	t.Helper()
	for i, s := range sizes {
		checkRead(t, l, first+uint64(i), s-headerSize)
	}
	want := first
	for r, err := range l.Records(first) {
		if err != nil {
			t.Fatalf("Records: at %d: %v", want, err)
		}
		if r.Offset != want || !bytes.Equal(r.Body, testBody(want, sizes[want-first]-headerSize)) {
			t.Fatalf("Records: got offset %d, want %d (or body differs)", r.Offset, want)
		}
		want++
	}
	if want != first+uint64(len(sizes)) {
		t.Fatalf("Records yielded up to %d, want %d", want, first+uint64(len(sizes)))
	}
}

// segLayout is where the roll rule of FORMAT.md puts records.
type segLayout struct {
	base  uint64
	sizes []int // whole record sizes
}

func (s segLayout) bytes() int64 {
	var n int64
	for _, r := range s.sizes {
		n += int64(r)
	}
	return n
}

// positions returns the byte position of each record in the segment.
func (s segLayout) positions() []int64 {
	pos := make([]int64, len(s.sizes))
	var p int64
	for i, r := range s.sizes {
		pos[i] = p
		p += int64(r)
	}
	return pos
}

// layout applies the roll rule: before a record of r bytes at position p, if
// p > 0 and p + r > segmentBytes, a new segment starts at this record.
func layout(first uint64, sizes []int, segmentBytes int64) []segLayout {
	segs := []segLayout{{base: first}}
	var p int64
	for i, r := range sizes {
		if p > 0 && p+int64(r) > segmentBytes {
			segs = append(segs, segLayout{base: first + uint64(i)})
			p = 0
		}
		cur := &segs[len(segs)-1]
		cur.sizes = append(cur.sizes, r)
		p += int64(r)
	}
	return segs
}

// sparseEntries applies the sparse rule of FORMAT.md to one segment's record
// sizes: (rel, pos) pairs.
func sparseEntries(sizes []int, interval int) [][2]uint32 {
	var out [][2]uint32
	count, pos := 0, 0
	for i, r := range sizes {
		if count > interval {
			out = append(out, [2]uint32{uint32(i), uint32(pos)})
			count = 0
		}
		count += r
		pos += r
	}
	return out
}

func encodeEntries(es [][2]uint32) []byte {
	b := make([]byte, 0, 8*len(es))
	for _, e := range es {
		b = binary.BigEndian.AppendUint32(b, e[0])
		b = binary.BigEndian.AppendUint32(b, e[1])
	}
	return b
}

// timeEntries parses a .timeindex file up to its first zero entry.
func timeEntries(b []byte) (ms []int64, rel []uint32) {
	for i := 0; i+12 <= len(b); i += 12 {
		m, r := int64(binary.BigEndian.Uint64(b[i:])), binary.BigEndian.Uint32(b[i+8:])
		if m == 0 && r == 0 {
			break
		}
		ms, rel = append(ms, m), append(rel, r)
	}
	return ms, rel
}

// logFile is one .log file of a directory.
type logFile struct {
	base uint64
	size int64
}

func logFiles(t testing.TB, dir string) []logFile {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []logFile
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") || strings.HasPrefix(e.Name(), segment.PreparedPrefix) {
			continue // the prepared next segment is not part of the log yet
		}
		base, suffix, ok := segment.ParseName(e.Name())
		if !ok || suffix != ".log" || len(e.Name()) != 24 {
			t.Fatalf("unexpected .log file name %q", e.Name())
		}
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a dropped segment's file, removed in the background since the listing
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, logFile{base, st.Size()})
	}
	slices.SortFunc(out, func(a, b logFile) int { return cmpU64(a.base, b.base) })
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func segPath(dir string, base uint64, suffix string) string {
	return filepath.Join(dir, segment.Name(base, suffix))
}

// hashDir returns a fingerprint (mode, size, SHA-256) of every file in dir
// but the prepared next segment, which comes and goes in the background.
func hashDir(t testing.TB, dir string) map[string]string {
	t.Helper()
	return testkit.MustHashDir(t, dir, testkit.HashOptions{FilesOnly: true, Skip: func(name string) bool {
		return strings.HasPrefix(name, segment.PreparedPrefix)
	}})
}

// copyDir copies the regular files of src into a new temporary directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	testkit.MustCopyDir(t, src, dst, false)
	return dst
}

// Tests.

func TestAppendReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	lens := []int{0, 1, 7, 8, 9, 15, 16, 17, 100, 4095, 4096, 4097, 65535, 65536, 300 << 10, DefaultMaxRecordBytes, 0, 3}
	for i, n := range lens {
		off, err := l.Append(testBody(uint64(i), n))
		if err != nil || off != uint64(i) {
			t.Fatalf("Append #%d (%d bytes): offset %d, %v", i, n, off, err)
		}
		if l.Next() != uint64(i)+1 {
			t.Fatalf("Next = %d after append #%d", l.Next(), i)
		}
	}
	sizes := make([]int, len(lens))
	for i, n := range lens {
		sizes[i] = headerSize + n
	}
	checkAll(t, l, 0, sizes)
	if r, err := l.Read(2); err != nil || len(r.Body) != 7 {
		t.Fatalf("Read(2): %d bytes, %v", len(r.Body), err)
	} else {
		r.Release()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{})
	if l.First() != 0 || l.Next() != uint64(len(lens)) {
		t.Fatalf("after reopen: First %d Next %d, want 0 and %d", l.First(), l.Next(), len(lens))
	}
	checkAll(t, l, 0, sizes)
}

func TestFirstOffset(t *testing.T) {
	dir := t.TempDir()
	const first = 1_000_000
	l := mustOpen(t, dir, Options{FirstOffset: first})
	if l.First() != first || l.Next() != first {
		t.Fatalf("empty log: First %d Next %d, want %d", l.First(), l.Next(), first)
	}
	sizes := appendN(t, l, 50, mixedSize)
	if _, err := os.Stat(filepath.Join(dir, "00000000000001000000.log")); err != nil {
		t.Fatalf("segment file of the first offset: %v", err)
	}
	for _, off := range []uint64{0, first - 1, first + 50, first + 51, 1<<64 - 1} {
		_, err := l.Read(off)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Read(%d): %v, want ErrNotFound", off, err)
		}
		if wrapped := fmt.Errorf("reading: %w", err); !errors.Is(wrapped, ErrNotFound) {
			t.Errorf("errors.Is through a second wrap failed: %v", wrapped)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprint(off)) {
			t.Errorf("Read(%d) error %q does not name the offset", off, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{FirstOffset: 5})
	if l.First() != first || l.Next() != first+50 {
		t.Fatalf("reopen with another FirstOffset: First %d Next %d, want %d and %d", l.First(), l.Next(), first, first+50)
	}
	checkAll(t, l, first, sizes)
	if off, err := l.Append(nil); err != nil || off != first+50 {
		t.Fatalf("Append after reopen: %d, %v", off, err)
	}
}

func TestTooLargeWritesNothing(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{MaxRecordBytes: 1000})
	sizes := appendN(t, l, 3, func(uint64) int { return 100 })
	if _, err := l.Append(make([]byte, 1000)); err != nil {
		t.Fatalf("Append of exactly MaxRecordBytes: %v", err)
	}
	sizes = append(sizes, headerSize+1000)
	for _, n := range []int{1001, 4096, 1 << 20} {
		_, err := l.Append(make([]byte, n))
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Append(%d bytes): %v, want ErrTooLarge", n, err)
		}
		_, err = l.AppendWith(make([]byte, n), &Attrs{Group: []byte("g")})
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("AppendWith(%d bytes): %v, want ErrTooLarge", n, err)
		}
		if l.Next() != 4 {
			t.Fatalf("Next = %d after a refused append, want 4", l.Next())
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{})
	if l.Next() != 4 {
		t.Fatalf("after reopen Next = %d, want 4", l.Next())
	}
	for i := range 3 {
		checkRead(t, l, uint64(i), 100)
	}
	n := 0
	for range l.Records(0) {
		n++
	}
	if n != len(sizes) {
		t.Fatalf("Records yields %d records, want %d", n, len(sizes))
	}
}

func TestClosedLog(t *testing.T) {
	l, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3, mixedSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if _, err := l.Append(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if _, err := l.Read(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Close: %v, want ErrClosed", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v, want ErrClosed", err)
	}
	for _, err := range l.Records(0) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Records after Close: %v, want ErrClosed", err)
		}
		break
	}
}

// TestMetaFile checks log.meta byte by byte against FORMAT.md.
func TestMetaFile(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 8192, IndexIntervalBytes: 512, MaxRecordBytes: 2 << 20, FirstOffset: 77})
	b, err := os.ReadFile(filepath.Join(dir, "log.meta"))
	if err != nil {
		t.Fatalf("log.meta after the first open: %v", err)
	}
	if len(b) != 29 || b[0] != 1 {
		t.Fatalf("log.meta: %d bytes, version %d; want 29 bytes, version 1", len(b), b[0])
	}
	if got, want := binary.BigEndian.Uint32(b[25:]), crc32.Checksum(b[:25], crc32.MakeTable(crc32.Castagnoli)); got != want {
		t.Fatalf("log.meta CRC %08x, want %08x", got, want)
	}
	if sb, ii, mr, fo := binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint32(b[9:]), binary.BigEndian.Uint32(b[13:]), binary.BigEndian.Uint64(b[17:]); sb != 8192 || ii != 512 || mr != 2<<20 || fo != 77 {
		t.Fatalf("log.meta holds SegmentBytes %d, interval %d, max %d, first %d", sb, ii, mr, fo)
	}
	big := 1536 << 10 // above the default MaxRecordBytes
	sizes := appendN(t, l, 200, func(off uint64) int {
		if off == 100 {
			return big
		}
		return 150
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// A reader told nothing uses the stored settings.
	ro := mustOpenRO(t, dir, Options{})
	checkAll(t, ro, 77, sizes)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened with zero Options: the stored SegmentBytes shapes new segments.
	l = mustOpen(t, dir, Options{})
	more := appendN(t, l, 300, func(uint64) int { return 150 })
	if _, err := l.Append(make([]byte, big)); err != nil {
		t.Fatalf("Append of a body the stored MaxRecordBytes allows: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(sizes), more...)
	all = append(all, headerSize+big)
	checkLayout(t, dir, 77, all, 8192)
}

// checkLayout compares the .log files of dir with what the roll rule gives
// for sizes: names, and exact sizes of sealed segments.
func checkLayout(t testing.TB, dir string, first uint64, sizes []int, segmentBytes int64) []segLayout {
	t.Helper()
	want := layout(first, sizes, segmentBytes)
	got := logFiles(t, dir)
	if len(got) != len(want) {
		t.Fatalf("%d segment files, the roll rule gives %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.base != w.base {
			t.Fatalf("segment %d has base %d, want %d", i, g.base, w.base)
		}
		if i < len(want)-1 && g.size != w.bytes() {
			t.Fatalf("sealed segment %d (base %d) is %d bytes, its records are %d", i, g.base, g.size, w.bytes())
		}
		if i == len(want)-1 && g.size < w.bytes() {
			t.Fatalf("active segment is %d bytes, its records are %d", g.size, w.bytes())
		}
	}
	return want
}

func TestMetaDamaged(t *testing.T) {
	src := t.TempDir()
	l := mustOpen(t, src, Options{SegmentBytes: 8192, MaxRecordBytes: 3 << 20})
	sizes := appendN(t, l, 10, mixedSize)
	// One record longer than the default limit: a reader that fell back
	// to the defaults must not call it damaged.
	long := testBody(10, 2<<20)
	if _, err := l.Append(long); err != nil {
		t.Fatal(err)
	}
	sizes = append(sizes, headerSize+len(long))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func([]byte) []byte{
		"flipped byte": func(b []byte) []byte { b[3] ^= 0x10; return b },
		"flipped CRC":  func(b []byte) []byte { b[28] ^= 1; return b },
		// A version byte of 2 whose CRC fails: damage. (A version-2 file
		// whose CRC checks out is a newer version's, which no open goes
		// past: TestReadOnlyOpenOfANewerLogMetaFails.)
		"version 2, damaged": func(b []byte) []byte {
			b[0] = 2
			binary.BigEndian.PutUint32(b[25:], crc32.Checksum(b[:25], crc32.MakeTable(crc32.Castagnoli))+1)
			return b
		},
		"truncated": func(b []byte) []byte { return b[:20] },
		"empty":     func([]byte) []byte { return nil },
		"longer":    func(b []byte) []byte { return append(b, 0) },
		"removed":   nil,
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, src)
			p := filepath.Join(dir, "log.meta")
			if damage == nil {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, damage(b), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// Every tool works: the settings come from the segments, and
			// the report says why.
			ro, err := OpenReadOnly(dir, Options{})
			if err != nil {
				t.Fatalf("OpenReadOnly with a damaged log.meta: %v", err)
			}
			checkAll(t, ro, 0, sizes)
			if damage != nil && !slices.ContainsFunc(ro.Recovery().Notes, func(n string) bool { return strings.Contains(n, "log.meta ignored") }) {
				t.Errorf("read-only open does not report the damaged log.meta: %q", ro.Recovery().Notes)
			}
			_ = ro.Close()
			rep, err := Recover(dir, Options{}, RecoverOptions{})
			if err != nil || !rep.After.Healthy() {
				t.Fatalf("Recover: %+v, %v", rep.After, err)
			}
			m, ok, err := readMeta(dir)
			if err != nil || !ok || m.MaxRecordBytes < len(long) || m.SegmentBytes != DefaultSegmentBytes || m.FirstOffset != 0 {
				t.Fatalf("log.meta after recover: %+v %v %v", m, ok, err)
			}
			l := mustOpen(t, dir, Options{})
			checkAll(t, l, 0, sizes)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
