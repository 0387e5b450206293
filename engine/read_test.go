package engine

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

func TestReadIsZeroCopy(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 8192})
	sizes := appendN(t, l, 200, func(uint64) int { return 100 })
	for _, off := range []uint64{3, 150, 199} { // sealed and active segments
		a, err := l.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		pa, pb := unsafe.Pointer(&a.Body[0]), unsafe.Pointer(&b.Body[0])
		if pa != pb {
			t.Fatalf("Read(%d) twice: bodies at %p and %p, want one place in the mapping", off, pa, pb)
		}
		var found *testkit.Mapping
		maps := testkit.Maps(t)
		for i, m := range maps {
			if uintptr(pa) >= m.Start && uintptr(pa) < m.End {
				found = &maps[i]
			}
		}
		if found == nil || !strings.HasPrefix(found.Path, dir+"/") || !strings.HasSuffix(found.Path, ".log") {
			t.Fatalf("Read(%d): body at %p is not in a mapping of a segment file (%+v)", off, pa, found)
		}
		if !strings.HasPrefix(found.Perms, "r-") {
			t.Fatalf("Read(%d): body mapped with %q, want read-only", off, found.Perms)
		}
		a.Release()
		b.Release()
	}
	checkAll(t, l, 0, sizes)
}

func TestReadAllocatesNothing(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 64 << 10})
	appendN(t, l, 2000, mixedSize)
	last := l.Next() - 1
	for _, off := range []uint64{last, last - 5, 10} {
		allocs := testing.AllocsPerRun(200, func() {
			r, err := l.Read(off)
			if err != nil {
				panic(err)
			}
			r.Release()
		})
		if allocs != 0 {
			t.Errorf("Read(%d)+Release allocates %.1f times, want 0", off, allocs)
		}
	}
}

// TestWriteIntoBodyFaults writes into a Body in a child process: the mapping
// is read-only, so the child must die of SIGSEGV or SIGBUS, and the log must
// be unchanged.
func TestWriteIntoBodyFaults(t *testing.T) {
	if dir := os.Getenv("PAGELOG_FAULT_CHILD_DIR"); dir != "" {
		l, err := Open(dir, Options{})
		if err != nil {
			os.Exit(10)
		}
		off, _ := strconv.ParseUint(os.Getenv("PAGELOG_FAULT_CHILD_OFFSET"), 10, 64)
		r, err := l.Read(off)
		if err != nil {
			os.Exit(11)
		}
		r.Body[len(r.Body)/2] ^= 0xff
		os.Stdout.WriteString("NO FAULT\n")
		os.Exit(12)
	}
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	sizes := appendN(t, l, 60, func(uint64) int { return 200 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	before := hashDir(t, dir)
	for _, off := range []uint64{1, 59} { // sealed, active
		cmd := testkit.Child("TestWriteIntoBodyFaults")
		cmd.Env = append(os.Environ(), "PAGELOG_FAULT_CHILD_DIR="+dir, "PAGELOG_FAULT_CHILD_OFFSET="+strconv.FormatUint(off, 10))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("child writing into Body(%d): %v, want it to die\n%s", off, err, out.Bytes())
		}
		if code := ee.ExitCode(); code >= 10 && code <= 12 {
			t.Fatalf("child exited with %d, want a fault\n%s", code, out.Bytes())
		}
		if !bytes.Contains(out.Bytes(), []byte("SIGSEGV")) && !bytes.Contains(out.Bytes(), []byte("SIGBUS")) {
			t.Fatalf("child died without SIGSEGV or SIGBUS: %v\n%s", err, out.Bytes())
		}
	}
	// The child opened the log for writing, which may rewrite checkpoint
	// files; the segments must be as they were.
	if d := testkit.DiffHashes(segmentHashes(before), segmentHashes(hashDir(t, dir))); d != "" {
		t.Fatalf("the log changed: %s", d)
	}
	checkAll(t, mustOpenRO(t, dir, Options{}), 0, sizes)
}

func TestRecordValidAfterClose(t *testing.T) {
	l, err := Open(t.TempDir(), Options{SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 100, func(uint64) int { return 300 })
	var held []Record
	for _, off := range []uint64{0, 50, 99} {
		r, err := l.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range held {
		if !bytes.Equal(r.Body, testBody(r.Offset, 300)) {
			t.Fatalf("record %d changed after Close", r.Offset)
		}
		r.Release()
	}
}

// TestCloseUnmapsEverything: once the log is closed and every record
// released, no mapping of the log's files may remain.
func TestCloseUnmapsEverything(t *testing.T) {
	dir := t.TempDir()
	for range 3 {
		l, err := Open(dir, Options{SegmentBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, 40, func(uint64) int { return 300 })
		r, err := l.Read(l.Next() - 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	ro := mustOpenRO(t, dir, Options{})
	checkRead(t, ro, 5, 300)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if left := testkit.MapsUnder(t, dir); len(left) > 0 {
		t.Fatalf("%d mappings of the log's files remain after Close:\n%s", len(left), left)
	}
}

func TestAttrsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	long := bytes.Repeat([]byte{'g'}, 128)
	cases := []*Attrs{
		nil,
		{},
		{HasDue: true, Due: 1_700_000_000_123},
		{HasDue: true, Due: -5},
		{Group: []byte{7}},
		{Group: long},
		{Dedup: []byte("order-4127")},
		{Dedup: long},
		{HasOrigin: true, Origin: 1<<64 - 1},
		{HasReceives: true, Receives: 42},
		{HasMoved: true, Moved: 1_268_410},
		{HasDue: true, Due: 99, Group: []byte("g1"), Dedup: []byte("d1"), HasOrigin: true, Origin: 3,
			HasReceives: true, Receives: 1<<32 - 1, HasMoved: true, Moved: 0},
	}
	want := func(a *Attrs) Attrs {
		if a == nil {
			return Attrs{}
		}
		return *a
	}
	check := func(r Record, i int) {
		t.Helper()
		got, err := r.Attrs()
		if err != nil {
			t.Fatalf("record %d: Attrs: %v", i, err)
		}
		if !reflect.DeepEqual(normAttrs(got), normAttrs(want(cases[i]))) {
			t.Fatalf("record %d: Attrs %+v, want %+v", i, got, want(cases[i]))
		}
		if !bytes.Equal(r.Body, testBody(uint64(i), 50+i)) {
			t.Fatalf("record %d: body differs", i)
		}
	}
	for i, a := range cases {
		off, err := l.AppendWith(testBody(uint64(i), 50+i), a)
		if err != nil || off != uint64(i) {
			t.Fatalf("AppendWith(%+v): %d, %v", a, off, err)
		}
	}
	n := l.Next()
	bad := []*Attrs{{Group: []byte{}}, {Group: make([]byte, 129)}, {Dedup: []byte{}}, {Dedup: make([]byte, 129)}, {HasDue: true, Group: make([]byte, 200)}}
	for _, a := range bad {
		if _, err := l.AppendWith([]byte("x"), a); !errors.Is(err, ErrInvalidAttrs) {
			t.Fatalf("AppendWith(group %d bytes, dedup %d bytes): %v, want ErrInvalidAttrs", len(a.Group), len(a.Dedup), err)
		}
	}
	if l.Next() != n {
		t.Fatalf("rejected attrs moved Next to %d", l.Next())
	}
	for i := range cases {
		r, err := l.Read(uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		check(r, i)
		r.Release()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{})
	if l.Next() != n {
		t.Fatalf("after reopen Next = %d, want %d", l.Next(), n)
	}
	i := 0
	for r, err := range l.Records(0) {
		if err != nil {
			t.Fatal(err)
		}
		check(r, i)
		i++
	}
}

// normAttrs maps empty Group and Dedup to nil so that DeepEqual compares
// values only.
func normAttrs(a Attrs) Attrs {
	if len(a.Group) == 0 {
		a.Group = nil
	}
	if len(a.Dedup) == 0 {
		a.Dedup = nil
	}
	return a
}

func TestRecordsIterator(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096, FirstOffset: 10})
	sizes := appendN(t, l, 300, mixedSize)
	for _, from := range []uint64{0, 10, 11, 150, 309, 310, 1000} {
		want := max(from, 10)
		for r, err := range l.Records(from) {
			if err != nil || r.Offset != want || !bytes.Equal(r.Body, testBody(want, sizes[want-10]-headerSize)) {
				t.Fatalf("Records(%d): at %d got offset %d, %v", from, want, r.Offset, err)
			}
			want++
		}
		if want != max(310, from) {
			t.Fatalf("Records(%d) ended at %d", from, want)
		}
	}
	// Breaking out early stops the iteration; records appended while
	// iterating are included.
	n := 0
	for r, err := range l.Records(10) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset == 309 {
			appendN(t, l, 5, mixedSize)
		}
		if n++; r.Offset == 312 {
			break
		}
	}
	if n != 303 {
		t.Fatalf("iteration stopped after %d records, want 303", n)
	}
}

// TestOffsetForTime checks the answer against the exact one with an injected
// clock: never late, and early by at most one index interval of records
// (two across a segment boundary, where the first record has no entry).
func TestOffsetForTime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segBytes int64
		slack    int  // index intervals the answer may be early by
		reopen   bool // asked after a reopen, with two segments mapped at most
	}{{"one segment", 1 << 20, 1, false}, {"segments", 32 << 10, 2, false}, {"segments, few mapped", 32 << 10, 2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var now int64 = 1_700_000_000_000
			opts := Options{SegmentBytes: tc.segBytes, IndexIntervalBytes: 1024}
			opts.now = func() time.Time { return time.UnixMilli(now) }
			dir := t.TempDir()
			l := mustOpen(t, dir, opts)
			var at []int64 // append time of each offset
			var sizes []int
			maxRec := 0
			for i := range 3000 {
				if i%7 == 0 {
					now += int64(i % 5) // several records share a millisecond
				}
				n := mixedSize(uint64(i)) % 900
				if _, err := l.Append(testBody(uint64(i), n)); err != nil {
					t.Fatal(err)
				}
				at, sizes = append(at, now), append(sizes, headerSize+n)
				maxRec = max(maxRec, headerSize+n)
			}
			if tc.reopen {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				opts.MaxMappedSegments = 2
				l = mustOpen(t, dir, opts)
				defer l.Close()
			}
			maps0, queries := l.cfg.Maps.Maps(), int64(0)
			for q := at[0] - 10; q <= now+10; q++ {
				queries++
				o, err := l.OffsetForTime(time.UnixMilli(q))
				if err != nil {
					t.Fatal(err)
				}
				exact := uint64(len(at))
				for i, a := range at {
					if a >= q {
						exact = uint64(i)
						break
					}
				}
				if o > exact {
					t.Fatalf("OffsetForTime(%d) = %d, but record %d was appended at %d", q, o, exact, at[exact])
				}
				gap := 0
				for i := o; i < exact; i++ {
					gap += sizes[i]
				}
				if limit := tc.slack * (1024 + maxRec); gap > limit {
					t.Fatalf("OffsetForTime(%d) = %d, exact %d: %d bytes early, limit %d", q, o, exact, gap, limit)
				}
			}
			// A sealed segment that ends before the time asked for is
			// passed over without mapping it, once its time index was
			// read: each segment is mapped for the first answer that
			// reaches it, then only the one holding an answer.
			segs := int64(len(*l.segs.Load()))
			if maps := l.cfg.Maps.Maps() - maps0; maps > segs+queries {
				t.Fatalf("%d questions mapped sealed segments %d times; %d segments", queries, maps, segs)
			}
		})
	}
}

// segmentHashes keeps the segment files (.log, .index, .timeindex) of h.
func segmentHashes(h map[string]string) map[string]string {
	out := make(map[string]string)
	for name, sum := range h {
		if _, _, ok := segment.ParseName(name); ok {
			out[name] = sum
		}
	}
	return out
}
