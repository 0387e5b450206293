package engine

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// TestEvictRacingDropsKeepsHeldRecords: a log of many sealed segments
// with one or two kept mapped; readers hold records (Read, Records,
// OffsetForTime) for a while and check their bytes after other segments
// were mapped, while DropBefore, retention, Truncate and appends run. The
// held bytes never change, no read reports ErrCorrupt, every record
// reads back afterwards, the map cache counts only segments of the log,
// and Close leaves it empty and no mapping of the log's files.
func TestEvictRacingDropsKeepsHeldRecords(t *testing.T) {
	deadline := time.Now().Add(5 * time.Second)
	round := 0
	defer func() { t.Logf("%d rounds", round) }()
	for ; round < 30 && time.Now().Before(deadline); round++ {
		rng := rand.New(rand.NewPCG(uint64(round), 33))
		dir := t.TempDir()
		max := 1 + round%2 // MaxMappedSegments
		opts := Options{SegmentBytes: 1024, IndexIntervalBytes: 128}
		l := mustOpen(t, dir, opts)
		appendN(t, l, 400, func(uint64) int { return 30 + rng.IntN(60) })
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		opts.MaxMappedSegments = max
		if round%3 == 0 {
			opts.RetentionBytes = 12 * 1024
		}
		l, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		var failed atomic.Value
		fail := func(format string, err error) {
			if err == nil {
				err = errors.New("nil")
			}
			failed.CompareAndSwap(nil, format+": "+err.Error())
		}
		okErr := func(err error) bool {
			return err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrTrimmed) || errors.Is(err, ErrClosed)
		}
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				var held []Record
				var want [][]byte
				check := func() {
					for i, h := range held {
						if !bytes.Equal(h.Body, want[i]) {
							fail("held record changed", errors.New("body"))
						}
						h.Release()
					}
					held, want = held[:0], want[:0]
				}
				for !stop.Load() {
					first, next := l.First(), l.Next()
					if next <= first {
						continue
					}
					off := first + r.Uint64N(next-first)
					switch r.IntN(3) {
					case 0:
						rec, err := l.Read(off)
						if err != nil {
							if !okErr(err) {
								fail("Read", err)
							}
							continue
						}
						if !bytes.Equal(rec.Body, testBody(rec.Offset, len(rec.Body))) {
							fail("Read body", errors.New("mismatch"))
						}
						held = append(held, rec)
						want = append(want, bytes.Clone(rec.Body))
					case 1:
						n := 0
						for rec, err := range l.Records(off) {
							if err != nil {
								if !okErr(err) {
									fail("Records", err)
								}
								break
							}
							if !bytes.Equal(rec.Body, testBody(rec.Offset, len(rec.Body))) {
								fail("Records body", errors.New("mismatch"))
							}
							if n%20 == 0 { // keep one past the loop body: Read it
								if h, err := l.Read(rec.Offset); err == nil {
									held = append(held, h)
									want = append(want, bytes.Clone(h.Body))
								} else if !okErr(err) {
									fail("Read in Records", err)
								}
							}
							if n++; n > 60 || stop.Load() {
								break
							}
						}
					case 2:
						if _, err := l.OffsetForTime(time.Now().Add(-time.Duration(r.IntN(1000)) * time.Millisecond)); !okErr(err) {
							fail("OffsetForTime", err)
						}
					}
					if len(held) > 4 || r.IntN(4) == 0 {
						check()
					}
				}
				check()
			}()
		}
		wg.Add(1)
		go func() { // the writer: appends, drops, cuts
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(round), 99))
			for i := 0; !stop.Load(); i++ {
				switch r.IntN(10) {
				case 0:
					first, next := l.First(), l.Next()
					if next > first+40 {
						if _, err := l.DropBefore(first + r.Uint64N(30)); err != nil && !okErr(err) {
							fail("DropBefore", err)
						}
					}
				case 1:
					first, next := l.First(), l.Next()
					if next > first+40 {
						if err := l.Truncate(next - 1 - r.Uint64N(30)); err != nil && !okErr(err) {
							fail("Truncate", err)
						}
					}
				default:
					want := l.Next()
					if _, err := l.Append(testBody(want, 30+r.IntN(60))); !okErr(err) {
						fail("Append", err)
					}
				}
			}
		}()
		time.Sleep(150 * time.Millisecond)
		if round%4 == 3 {
			// Close while the readers still run.
			if err := l.Close(); err != nil {
				fail("Close", err)
			}
		}
		stop.Store(true)
		wg.Wait()
		if f := failed.Load(); f != nil {
			t.Fatalf("round %d: %v", round, f)
		}
		if round%4 != 3 {
			// Every record still reads back as appended.
			for off := l.First(); off < l.Next(); off++ {
				rec, err := l.Read(off)
				if err != nil {
					if errors.Is(err, ErrNotFound) {
						continue // a gap below First is not expected, but retention may run
					}
					t.Fatalf("round %d: Read(%d): %v", round, off, err)
				}
				if !bytes.Equal(rec.Body, testBody(off, len(rec.Body))) {
					t.Fatalf("round %d: Read(%d): body mismatch", round, off)
				}
				rec.Release()
			}
			// Every entry of the map cache is a segment of the log that
			// is mapped (the bound itself is not checked here).
			lazy := 0
			for _, s := range *l.segs.Load() {
				if s.Lazy() {
					lazy++
				}
			}
			if m := l.cfg.Maps.Mapped(); m < 0 || m > lazy {
				t.Fatalf("round %d: the map cache counts %d mapped of %d sealed segments", round, m, lazy)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if m := l.cfg.Maps.Mapped(); m != 0 {
			t.Fatalf("round %d: the map cache counts %d mapped after Close", round, m)
		}
		if n := len(testkit.MapsUnder(t, dir)); n != 0 {
			t.Fatalf("round %d: %d mappings of the log's files left after Close", round, n)
		}
	}
}
