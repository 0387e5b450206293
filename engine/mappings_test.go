package engine

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// mappedLogFiles counts the distinct .log files of dir mapped by this
// process (and not removed).
func mappedLogFiles(t *testing.T, dir string) int {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range testkit.MapsUnder(t, dir) {
		if !m.Deleted && strings.HasSuffix(m.Path, ".log") {
			seen[m.Path] = true
		}
	}
	return len(seen)
}

// openFDs counts the descriptors of this process open on files of dir.
func openFDs(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, d := range testkit.DescriptorsUnder(t, dir) {
		// A temporary file is a checkpoint being written (the
		// checkpointer's log.recovery under SyncInterval): open for a
		// moment, not held.
		if !strings.HasSuffix(d.Path, ".tmp") {
			n++
		}
	}
	return n
}

// Sealed segments are mapped when first read and at most MaxMappedSegments
// of them stay mapped; a held record keeps its segment mapped.
func TestBoundedMappings(t *testing.T) {
	dir := t.TempDir()
	const max = 8
	opts := Options{SegmentBytes: 8 << 10, MaxMappedSegments: max}
	l := mustOpen(t, dir, opts)
	sizes := appendN(t, l, 3000, func(uint64) int { return 500 }) // about 190 segments
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l = mustOpen(t, dir, opts)
	defer l.Close()
	took := time.Since(start)
	st := l.Stats()
	if st.Segments < 150 {
		t.Fatalf("only %d segments", st.Segments)
	}
	if st.MappedSegments != 1 || mappedLogFiles(t, dir) > 1 {
		t.Fatalf("after a clean open: %d segments mapped (%d .log files in /proc/self/maps), want the active one only (open took %v)",
			st.MappedSegments, mappedLogFiles(t, dir), took)
	}
	// A record held from the start, across all the evictions below.
	held, err := l.Read(5)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	heldBody := bytes.Clone(held.Body)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		off := rng.Uint64N(uint64(len(sizes)))
		r, err := l.Read(off)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if !bytes.Equal(r.Body, testBody(off, 500)) {
			t.Fatalf("Read(%d): wrong body", off)
		}
		r.Release()
	}
	if !bytes.Equal(held.Body, heldBody) {
		t.Fatal("a held record changed while its segment was a candidate for eviction")
	}
	st = l.Stats()
	// The bound, plus the active segment and the one the held record pins.
	if st.MappedSegments > max+2 || mappedLogFiles(t, dir) > max+2 {
		t.Fatalf("after random reads: %d segments mapped, %d .log files in /proc/self/maps; want <= %d",
			st.MappedSegments, mappedLogFiles(t, dir), max+2)
	}
	if n := openFDs(t, dir); n >= 10 {
		t.Fatalf("%d descriptors open on the log's files, want < 10", n)
	}
	checkAll(t, l, 0, sizes)
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify with bounded mappings: %v %+v", err, rep)
	}
}

// Readers, appends, DropBefore and eviction at once (run under -race):
// every record read is byte-exact, no reader faults.
func TestBoundedMappingsConcurrent(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, MaxMappedSegments: 4})
	defer l.Close()
	appendN(t, l, 2000, func(uint64) int { return 300 })
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 8)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			var held []Record
			defer func() {
				for _, r := range held {
					r.Release()
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				first, next := l.First(), l.Next()
				off := first + rng.Uint64N(next-first)
				r, err := l.Read(off)
				if err != nil {
					continue // dropped meanwhile
				}
				if !bytes.Equal(r.Body, testBody(off, 300)) {
					errc <- os.ErrInvalid
					r.Release()
					return
				}
				held = append(held, r)
				if len(held) > 5 {
					held[0].Release()
					held = held[1:]
				}
				for _, h := range held {
					if !bytes.Equal(h.Body, testBody(h.Offset, 300)) {
						errc <- os.ErrInvalid
						return
					}
				}
			}
		}()
	}
	for i := 2000; i < 6000; i++ {
		if _, err := l.Append(testBody(uint64(i), 300)); err != nil {
			t.Fatal(err)
		}
		if i%400 == 0 {
			if _, err := l.DropBefore(uint64(i - 1500)); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatalf("a reader saw a wrong body: %v", err)
	default:
	}
}

// Segments the writer seals in this process are bounded too: a writer
// rolling small segments for long kept every one mapped (three mappings
// each, toward vm.max_map_count), whatever MaxMappedSegments said. Under
// every sync policy (SyncAlways seals on the roll, the others in the
// background), with a held record across the evictions.
func TestBoundedMappingsSealedInProcess(t *testing.T) {
	for _, sync := range []SyncPolicy{SyncNone, SyncInterval, SyncAlways} {
		t.Run(sync.String(), func(t *testing.T) {
			dir := t.TempDir()
			const max = 1
			l := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, MaxMappedSegments: max, Sync: sync})
			defer l.Close()
			sizes := appendN(t, l, 300, func(uint64) int { return 500 })
			held, err := l.Read(3)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, appendN(t, l, 1700, func(uint64) int { return 500 })...)
			// Under SyncInterval the sealed segments are synced in the
			// background, one after another, each through a descriptor
			// opened by name and held (not evicted) while its fdatasync
			// runs. On a loaded machine that syncer lags behind the rolls,
			// and a count taken beside it found a descriptor more open, or
			// a sealed segment more mapped, for as long as one sync lasted.
			// Sync waits for those syncs: the bound is counted when none is
			// in flight.
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			// The bound; the active segment, the prepared one, the one
			// the held record pins and the one sealed last (kept while
			// it joins the cache).
			within := func(when string) {
				t.Helper()
				st := l.Stats()
				if st.Segments < 200 {
					t.Fatalf("only %d segments", st.Segments)
				}
				if st.MappedSegments > max+3 || mappedLogFiles(t, dir) > max+4 {
					t.Fatalf("%s: %d of %d segments mapped (%d .log files in /proc/self/maps), want at most %d",
						when, st.MappedSegments, st.Segments, mappedLogFiles(t, dir), max+3)
				}
				// Descriptors are bounded with the mappings: three for
				// each of the active and prepared segments, the lock, and
				// one for each sealed segment still mapped.
				if n := openFDs(t, dir); n > 7+max+3 {
					t.Fatalf("%s: %d descriptors open on files of the log (%d segments), want at most %d", when, n, st.Segments, 7+max+3)
				}
			}
			within("after the appends")
			if !bytes.Equal(held.Body, testBody(3, 500)) {
				t.Fatal("a held record changed while its segment was evicted around it")
			}
			held.Release()
			checkAll(t, l, 0, sizes)
			within("after reading every record")
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
				t.Fatalf("Verify: %v %+v", err, rep)
			}
		})
	}
}
