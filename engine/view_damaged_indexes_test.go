package engine

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// damageSealedIndexFiles damages the index files of the sealed segments of the log in
// dir in one of several ways, chosen by rng: removed, cut short, bytes
// flipped, zeroed, or garbage appended.
func damageSealedIndexFiles(t *testing.T, dir string, rng *rand.Rand) {
	t.Helper()
	bases, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range bases[:len(bases)-1] {
		for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
			p := segPath(dir, base, suffix)
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			switch rng.IntN(6) {
			case 0:
				err = os.Remove(p)
			case 1:
				err = os.WriteFile(p, b[:rng.IntN(len(b)+1)], 0o600)
			case 2:
				if len(b) > 0 {
					for range 1 + rng.IntN(4) {
						b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
					}
				}
				err = os.WriteFile(p, b, 0o600)
			case 3:
				err = os.WriteFile(p, make([]byte, len(b)), 0o600)
			case 4:
				g := make([]byte, 1+rng.IntN(40))
				for i := range g {
					g[i] = byte(rng.Uint32())
				}
				err = os.WriteFile(p, append(b, g...), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestReadOnlyDamagedIndexesAcrossEvictions: a read-only log whose
// sealed segments' index files are damaged rebuilds their indexes in
// memory; with MaxMappedSegments 1 every other lookup evicts and maps a
// segment again from its damaged files. Reads, OffsetForTime, Records and
// Verify, asked over and over in a random order, answer what a fresh
// read-only open (that evicts nothing) answers.
func TestReadOnlyDamagedIndexesAcrossEvictions(t *testing.T) {
	deadline := time.Now().Add(4 * time.Second)
	round := 0
	defer func() { t.Logf("%d rounds", round) }()
	for ; round < 20 && time.Now().Before(deadline); round++ {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		t0 := time.Now().Add(-time.Hour).UnixMilli()
		ms := t0
		opts := Options{SegmentBytes: 2048, IndexIntervalBytes: 128}
		opts.now = func() time.Time { return time.UnixMilli(ms) }
		dir := t.TempDir()
		w := mustOpen(t, dir, opts)
		for range 300 {
			want := w.Next()
			if _, err := w.Append(testBody(want, 20+rng.IntN(80))); err != nil {
				t.Fatal(err)
			}
			switch rng.IntN(10) {
			case 0:
				ms -= int64(rng.IntN(50)) // the clock goes back
			default:
				ms += int64(rng.IntN(20))
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		damageSealedIndexFiles(t, dir, rng)
		ref := mustOpenRO(t, dir, Options{MaxMappedSegments: 1 << 20})
		first, next := ref.First(), ref.Next()
		refRep, err := ref.Verify(nil)
		if err != nil {
			t.Fatal(err)
		}
		refTime := map[int64]uint64{}
		var times []int64
		for range 12 {
			at := t0 - 100 + rng.Int64N(ms-t0+200)
			// Each time asked of a fresh open: its first lookups.
			f, err := OpenReadOnly(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			o, err := f.OffsetForTime(time.UnixMilli(at))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			refTime[at] = o
			times = append(times, at)
		}
		l := mustOpenRO(t, dir, Options{MaxMappedSegments: 1})
		if l.First() != first || l.Next() != next {
			t.Fatalf("round %d: [%d, %d), a fresh open [%d, %d)", round, l.First(), l.Next(), first, next)
		}
		segs := *l.segs.Load()
		for step := range 150 {
			switch rng.IntN(5) {
			case 0, 1:
				off := first + rng.Uint64N(next-first)
				got, gerr := l.Read(off)
				want, werr := ref.Read(off)
				if (gerr == nil) != (werr == nil) || gerr == nil && !bytes.Equal(got.Body, want.Body) {
					t.Fatalf("round %d step %d: Read(%d): %v, a fresh open %v", round, step, off, gerr, werr)
				}
				if gerr == nil && !bytes.Equal(got.Body, testBody(off, len(got.Body))) {
					t.Fatalf("round %d step %d: Read(%d): not the body appended", round, step, off)
				}
				got.Release()
				want.Release()
			case 2:
				at := times[rng.IntN(len(times))]
				o, err := l.OffsetForTime(time.UnixMilli(at))
				if err != nil || o != refTime[at] {
					t.Fatalf("round %d step %d: OffsetForTime(t0%+d) = %d, %v; a fresh open says %d", round, step, at-t0, o, err, refTime[at])
				}
			case 3:
				s := segs[rng.IntN(len(segs))]
				var got []uint64
				for r, err := range l.Records(s.Base()) {
					if err != nil {
						if errors.Is(err, ErrCorrupt) {
							t.Fatalf("round %d step %d: Records: %v", round, step, err)
						}
						break
					}
					got = append(got, r.Offset)
					if len(got) == 40 {
						break
					}
				}
				want := make([]uint64, 0, 40)
				for off := s.Base(); off < next && len(want) < 40; off++ {
					want = append(want, off)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("round %d step %d: Records(%d) = %v, want %v", round, step, s.Base(), got, want)
				}
			case 4:
				if rng.IntN(5) != 0 {
					continue // Verify reads every segment: not at every step
				}
				rep, err := l.Verify(nil)
				if err != nil {
					t.Fatal(err)
				}
				if rep.Records != refRep.Records || rep.Damaged != refRep.Damaged || rep.Missing != refRep.Missing || len(rep.IndexProblems) != len(refRep.IndexProblems) {
					t.Fatalf("round %d step %d: Verify %+v\na fresh open %+v", round, step, rep, refRep)
				}
			}
		}
		if m := l.cfg.Maps.Mapped(); m > 1 {
			t.Logf("round %d: %d sealed segments mapped with MaxMappedSegments 1", round, m)
		}
		l.Close()
		ref.Close()
	}
}
