package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/mmapfile"
)

// TestRollRule writes records of mixed sizes, some larger than SegmentBytes,
// and checks the files against the roll rule of FORMAT.md.
func TestRollRule(t *testing.T) {
	for _, segBytes := range []int64{4096, 16 << 10, 64 << 10} {
		t.Run("SegmentBytes="+itoa(segBytes), func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: segBytes})
			big := func(off uint64) int {
				if off%97 == 13 {
					return int(segBytes) + int(off%3)*1000 // alone in its segment
				}
				return mixedSize(off)
			}
			sizes := appendN(t, l, 1500, big)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			segs := checkLayout(t, dir, 0, sizes, segBytes)
			if len(segs) < 10 {
				t.Fatalf("only %d segments", len(segs))
			}
			for i, s := range segs[:len(segs)-1] {
				next := segs[i+1].sizes[0]
				if len(s.sizes) > 1 && s.bytes() > segBytes {
					t.Fatalf("segment %d holds %d bytes in %d records, above SegmentBytes", s.base, s.bytes(), len(s.sizes))
				}
				if s.bytes()+int64(next) <= segBytes {
					t.Fatalf("segment %d was sealed though the next record (%d bytes) fits", s.base, next)
				}
				for j, r := range s.sizes {
					if int64(r) > segBytes && len(s.sizes) != 1 {
						t.Fatalf("record %d of %d bytes shares segment %d", s.base+uint64(j), r, s.base)
					}
				}
			}
			l = mustOpen(t, dir, Options{})
			checkAll(t, l, 0, sizes)
		})
	}
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestLookupAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 8192, FirstOffset: 12345})
	sizes := appendN(t, l, 3000, mixedSize)
	if n := len(logFiles(t, dir)); n < 50 {
		t.Fatalf("only %d segments", n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(l *Log) {
		for range 3000 {
			i := rng.IntN(len(sizes))
			checkRead(t, l, 12345+uint64(i), sizes[i]-headerSize)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	check(mustOpen(t, dir, Options{}))
	check(mustOpenRO(t, dir, Options{}))
}

// TestIndexFilesFollowSparseRule compares the .index files with the sparse
// rule recomputed from the record sizes, and the .timeindex files with them.
func TestIndexFilesFollowSparseRule(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 256 << 10
	l := mustOpen(t, dir, Options{SegmentBytes: segBytes})
	sizes := appendN(t, l, 2500, mixedSize)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	segs := checkLayout(t, dir, 0, sizes, segBytes)
	checkIndexFiles(t, dir, segs, DefaultIndexIntervalBytes, len(segs)-1)
	// The active segment's index is preallocated: entries, then zeros.
	last := segs[len(segs)-1]
	want := encodeEntries(sparseEntries(last.sizes, DefaultIndexIntervalBytes))
	b, err := os.ReadFile(segPath(dir, last.base, ".index"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < len(want) || !bytes.Equal(b[:len(want)], want) || !testkit.AllZero(b[len(want):]) {
		t.Fatalf("active .index: %d bytes, does not start with the %d expected entries then zeros", len(b), len(want)/8)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkIndexFiles checks the index files of the first n segments of segs
// (sealed ones: exact sizes).
func checkIndexFiles(t testing.TB, dir string, segs []segLayout, interval, n int) {
	t.Helper()
	for _, s := range segs[:n] {
		want := sparseEntries(s.sizes, interval)
		b, err := os.ReadFile(segPath(dir, s.base, ".index"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, encodeEntries(want)) {
			t.Fatalf("segment %d: .index holds %d bytes, want the %d entries of the sparse rule", s.base, len(b), len(want))
		}
		tb, err := os.ReadFile(segPath(dir, s.base, ".timeindex"))
		if err != nil {
			t.Fatal(err)
		}
		if len(tb) != 12*len(want) {
			t.Fatalf("segment %d: .timeindex is %d bytes, want %d", s.base, len(tb), 12*len(want))
		}
		ms, rel := timeEntries(tb)
		if len(rel) != len(want) {
			t.Fatalf("segment %d: %d time entries, want %d", s.base, len(rel), len(want))
		}
		for i := range want {
			if rel[i] != want[i][0] {
				t.Fatalf("segment %d: time entry %d has rel %d, want %d", s.base, i, rel[i], want[i][0])
			}
			if i > 0 && ms[i] < ms[i-1] {
				t.Fatalf("segment %d: time entry %d goes back in time", s.base, i)
			}
		}
	}
}

// TestFullDiskAtRoll injects ENOSPC into the preallocation of new segments.
func TestFullDiskAtRoll(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	var refused atomic.Int64
	opts := Options{SegmentBytes: 4096}
	opts.allocate = func(f *os.File, off, n int64) error {
		if full.Load() {
			refused.Add(1)
			return syscall.ENOSPC
		}
		return mmapfile.Allocate(f, off, n)
	}
	l := mustOpen(t, dir, opts)
	const bodyLen = 100
	sizes := appendN(t, l, 100, func(uint64) int { return bodyLen })
	full.Store(true)
	// Appends go on while they fit, in the active segment or in the next
	// one, prepared before the disk filled; the first append that needs a
	// segment allocated now fails, and leaves every file as it was.
	var failedAt uint64
	var before []logFile
	var hashes map[string]string
	for {
		want := l.Next()
		// The last roll's goroutine (naming the index files, sealing) is
		// not the failed roll's: let it finish before the files are taken.
		l.mu.Lock()
		l.awaitSeal()
		l.mu.Unlock()
		before, hashes = logFiles(t, dir), hashDir(t, dir)
		off, err := l.Append(testBody(want, bodyLen))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Append at %d: %v, want an error wrapping ENOSPC", want, err)
			}
			failedAt = want
			break
		}
		if off != want {
			t.Fatalf("Append: offset %d, want %d", off, want)
		}
		sizes = append(sizes, headerSize+bodyLen)
		if len(sizes) > 300 {
			t.Fatal("no roll was attempted")
		}
	}
	segs := layout(0, append(sizes, headerSize+bodyLen), 4096)
	if segs[len(segs)-1].base != failedAt || len(segs[len(segs)-1].sizes) != 1 {
		t.Fatalf("the append at %d failed, but the roll rule rolls at %d", failedAt, segs[len(segs)-1].base)
	}
	if refused.Load() == 0 {
		t.Fatal("the allocate hook was never called")
	}
	for range 3 {
		if _, err := l.Append(testBody(failedAt, bodyLen)); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("retried Append: %v, want ENOSPC", err)
		}
	}
	if l.Next() != failedAt {
		t.Fatalf("Next = %d after failed appends, want %d", l.Next(), failedAt)
	}
	if got := logFiles(t, dir); len(got) != len(before) {
		t.Fatalf("%d segment files after failed rolls, want %d", len(got), len(before))
	}
	if d := diffFileSet(hashes, hashDir(t, dir)); d != "" {
		t.Fatalf("failed rolls left files behind or removed some: %s", d)
	}
	checkAll(t, l, 0, sizes)

	full.Store(false)
	if off, err := l.Append(testBody(failedAt, bodyLen)); err != nil || off != failedAt {
		t.Fatalf("Append after space came back: %d, %v; want %d", off, err, failedAt)
	}
	sizes = append(sizes, headerSize+bodyLen)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, dir, 0, sizes, 4096)
	checkAll(t, mustOpen(t, dir, Options{}), 0, sizes)
}

// diffFileSet reports files added or removed (contents may differ).
func diffFileSet(a, b map[string]string) string {
	for k := range a {
		if _, ok := b[k]; !ok {
			return k + " removed"
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			return k + " added"
		}
	}
	return ""
}

// TestIndexDamage damages the index files of two sealed segments (one in the
// middle, checked lazily, and the last sealed one, checked at open).
func TestIndexDamage(t *testing.T) {
	src, sizes, segs := damageTemplate(t)
	targets := []segLayout{segs[1], segs[len(segs)-2]}
	rng := rand.New(rand.NewPCG(5, 6))
	cases := map[string]func(t *testing.T, dir string, s segLayout){
		"deleted": func(t *testing.T, dir string, s segLayout) {
			for _, suf := range []string{".index", ".timeindex"} {
				if err := os.Remove(segPath(dir, s.base, suf)); err != nil {
					t.Fatal(err)
				}
			}
		},
		"truncated": func(t *testing.T, dir string, s segLayout) {
			for _, suf := range []string{".index", ".timeindex"} {
				if err := os.Truncate(segPath(dir, s.base, suf), 44); err != nil {
					t.Fatal(err)
				}
			}
		},
		"emptied": func(t *testing.T, dir string, s segLayout) {
			if err := os.Truncate(segPath(dir, s.base, ".index"), 0); err != nil {
				t.Fatal(err)
			}
		},
		"garbage": func(t *testing.T, dir string, s segLayout) {
			for _, suf := range []string{".index", ".timeindex"} {
				b := make([]byte, 24*len(sparseEntries(s.sizes, DefaultIndexIntervalBytes)))
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				if err := os.WriteFile(segPath(dir, s.base, suf), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		},
		"time index garbage": func(t *testing.T, dir string, s segLayout) {
			b := bytes.Repeat([]byte{0xff, 0, 0x13}, 100)
			if err := os.WriteFile(segPath(dir, s.base, ".timeindex"), b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"past the log": func(t *testing.T, dir string, s segLayout) {
			es := sparseEntries(s.sizes, DefaultIndexIntervalBytes)
			for i := len(es) / 2; i < len(es); i++ {
				es[i][0] += 1000
				es[i][1] = uint32(s.bytes()) + uint32(i)*100
			}
			if err := os.WriteFile(segPath(dir, s.base, ".index"), encodeEntries(es), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, src)
			for _, s := range targets {
				damage(t, dir, s)
			}
			before := hashDir(t, dir)
			ro := mustOpenRO(t, dir, Options{})
			checkAll(t, ro, 0, sizes)
			if _, err := ro.OffsetForTime(time.Now()); err != nil {
				t.Fatal(err)
			}
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
			if d := testkit.DiffHashes(before, hashDir(t, dir)); d != "" {
				t.Fatalf("read-only open changed the directory: %s", d)
			}
			l := mustOpen(t, dir, Options{})
			checkAll(t, l, 0, sizes)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			for _, s := range targets {
				checkIndexFiles(t, dir, []segLayout{s}, DefaultIndexIntervalBytes, 1)
			}
		})
	}
}

// TestIndexEntryIntoRecord moves one index entry of a sealed segment, in the
// middle of the index, a few bytes forward: still increasing and inside the
// segment, so only a check of the record it points to can catch it. Reads
// must not be hurt by a damaged cache.
func TestIndexEntryIntoRecord(t *testing.T) {
	src, sizes, segs := damageTemplate(t)
	s := segs[1]
	es := sparseEntries(s.sizes, DefaultIndexIntervalBytes)
	for _, shift := range []uint32{1, 16} {
		t.Run(fmt.Sprintf("shift=%d", shift), func(t *testing.T) {
			dir := copyDir(t, src)
			bad := append([][2]uint32(nil), es...)
			bad[2][1] += shift
			if err := os.WriteFile(segPath(dir, s.base, ".index"), encodeEntries(bad), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, open := range []func(string, Options) (*Log, error){OpenReadOnly, Open} {
				l, err := open(dir, Options{})
				if err != nil {
					t.Fatal(err)
				}
				checkAllExcept(t, l, sizes, nil)
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
