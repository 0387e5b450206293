package segment

import (
	"sync"
	"testing"
	"time"
)

// preparedSegment is a prepared segment of segBytes with its first n bytes
// allocated, closed when the test ends.
func preparedSegment(t *testing.T, segBytes, n int64) *Segment {
	t.Helper()
	s, err := Prepare(testConfig(t, segBytes, 4096))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Preallocate(n); err != nil {
		t.Fatal(err)
	}
	return s
}

// A roll may take a prepared segment while the preparer still faults its
// first pages in: Activate runs beside the chunk in flight (the race
// detector watches the files Activate replaces), the faulting stops at the
// next chunk, and the segment takes records and seals as a created one.
func TestActivateWhilePrefaulting(t *testing.T) {
	const part = 64 << 10
	s := preparedSegment(t, 8<<20, part)
	alloc := s.w.alloc.Load() // in whole allocation steps
	if alloc < part || alloc >= 4<<20 {
		t.Fatalf("Preallocate(%d) allocated %d", part, alloc)
	}

	inLoop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	asks := 0
	go func() {
		defer wg.Done()
		// Asked for more than is allocated: the chunk that runs beside
		// Activate must not grow the file (through s.f, which Activate
		// replaces).
		s.PrefaultPrepared(4<<20, func() bool {
			asks++
			if asks == 2 {
				close(inLoop)
			}
			return true
		})
	}()
	<-inLoop
	if err := s.Activate(500); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if p := s.Populated(); p != alloc {
		t.Fatalf("populated %d bytes, want the %d allocated", p, alloc)
	}
	if s.Base() != 500 || s.Next() != 500 || s.End() != 0 {
		t.Fatalf("activated segment: base %d next %d end %d", s.Base(), s.Next(), s.End())
	}
	w := fill(t, s)
	checkReads(t, s, w)
	if err := s.Seal(false); err != nil {
		t.Fatal(err)
	}
	checkReads(t, s, w)
}

// PrefaultPrepared stops at the first chunk its caller says no to.
func TestPrefaultPreparedStops(t *testing.T) {
	s := preparedSegment(t, 8<<20, 1<<20)
	asks := 0
	s.PrefaultPrepared(1<<20, func() bool { asks++; return asks <= 3 })
	if p := s.Populated(); p != 3*(64<<10) {
		t.Fatalf("populated %d bytes after three chunks", p)
	}
}

// Preallocate never allocates past SegmentBytes, and PrefaultPrepared
// faults in only what is allocated.
func TestPrefaultPreparedStaysInAllocation(t *testing.T) {
	s := preparedSegment(t, 256<<10, 1<<30)
	if got := s.w.alloc.Load(); got > s.cfg.SegmentBytes {
		t.Fatalf("allocated %d, past SegmentBytes %d", got, s.cfg.SegmentBytes)
	}
	s.PrefaultPrepared(1<<30, func() bool { return true })
	if p, a := s.Populated(), s.w.alloc.Load(); p != a {
		t.Fatalf("populated %d of %d allocated bytes", p, a)
	}
}

// The writer grows the file without waiting for the prefaulter: a chunk
// in flight holds popMu for as long as the kernel takes to zero a 2 MiB
// folio (milliseconds with fresh memory), and a writer that waited for it
// parked its goroutine. Here popMu is held throughout, and the writer
// fills a whole segment, growing the file step by step.
func TestWriterGrowsBesidePrefaultChunk(t *testing.T) {
	s, err := Create(testConfig(t, 1<<20, 4096), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := s.w.alloc.Load()
	s.popMu.Lock() // a prefault chunk in flight
	filled := make(chan written, 1)
	go func() { filled <- fill(t, s) }()
	var w written
	select {
	case w = <-filled:
		s.popMu.Unlock()
	case <-time.After(30 * time.Second):
		s.popMu.Unlock()
		<-filled
		t.Fatal("the writer waits for the prefaulter's lock to grow the file")
	}
	if after := s.w.alloc.Load(); after <= before {
		t.Fatalf("the file did not grow: %d bytes allocated before, %d after", before, after)
	}
	checkReads(t, s, w)
}
