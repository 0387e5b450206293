package segment

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pagelog/pagelog/internal/addrspace"
	"github.com/pagelog/pagelog/internal/testkit"
)

// Segments sealed in the process (Seal) join their log's map cache: they
// may be evicted while no reader holds them, and are mapped again on use.

// newSealed creates, fills and seals a segment at base, its seal time
// noted at ms on cfg's clock.
func newSealed(t *testing.T, cfg *Config, base uint64, clock *atomic.Int64, ms int64, sync bool) (*Segment, written) {
	t.Helper()
	s, err := Create(cfg, base)
	if err != nil {
		t.Fatal(err)
	}
	w := fill(t, s)
	clock.Store(ms)
	s.NoteSealTime()
	if err := s.Seal(sync); err != nil {
		t.Fatal(err)
	}
	return s, w
}

// readsHeld checks every record of s holding a reference, as a log's
// readers do.
func readsHeld(t *testing.T, s *Segment, w written) {
	t.Helper()
	if !s.Acquire() {
		t.Fatal("Acquire failed")
	}
	defer s.Release()
	checkReads(t, s, w)
}

// TestSealJoinsMapCache: a sealed segment is recorded as mapped, is
// evicted by the next one (one kept mapped), stays unmapped through Hold
// and Sync, maps again on Acquire with its records, index and seal time
// (the log's clock, not the file's) as they were, and the cache counts
// every segment once; with and without retired address ranges.
func TestSealJoinsMapCache(t *testing.T) {
	for _, ranges := range []bool{false, true} {
		t.Run(map[bool]string{false: "unmap", true: "ranges"}[ranges], func(t *testing.T) {
			cfg := testConfig(t, 4096, 1<<20) // no index entries: NewestTime is the seal time
			var clock atomic.Int64
			cfg.NowMillis = clock.Load
			cfg.Maps = &MapCache{Max: 1}
			if ranges {
				cfg.Ranges = addrspace.For("segment-test:" + t.Name())
			}
			const t0 = 1_000_000 // far from the wall clock, and from the files' times
			a, wa := newSealed(t, cfg, 0, &clock, t0, false)
			if !a.Lazy() || !a.isMapped.Load() || cfg.Maps.Mapped() != 1 {
				t.Fatalf("after Seal: lazy %v, mapped %v, the cache counts %d", a.Lazy(), a.isMapped.Load(), cfg.Maps.Mapped())
			}
			b, wb := newSealed(t, cfg, a.Next(), &clock, t0+1000, true)
			if a.isMapped.Load() || cfg.Maps.Mapped() != 1 || testkit.IsMapped(t, a.Path()) {
				t.Fatalf("the first sealed segment was not evicted by the second: mapped %v, the cache counts %d, in maps %v",
					a.isMapped.Load(), cfg.Maps.Mapped(), testkit.IsMapped(t, a.Path()))
			}
			// Hold and Sync: the file, not the bytes.
			if !a.Hold() {
				t.Fatal("Hold failed")
			}
			if err := a.Sync(); err != nil {
				t.Fatalf("Sync of an evicted sealed segment: %v", err)
			}
			if a.isMapped.Load() || cfg.Maps.Mapped() != 1 {
				t.Fatal("Hold or Sync mapped the segment")
			}
			a.Release()
			// Mapped again to read its time index (it has no entry).
			if ms, ok := a.NewestTime(); !ok || ms != t0 {
				t.Fatalf("NewestTime of the evicted segment: %d %v, want %d", ms, ok, t0)
			}
			readsHeld(t, a, wa)
			if !a.isMapped.Load() || b.isMapped.Load() || cfg.Maps.Mapped() != 1 {
				t.Fatalf("after reading the first: mapped %v and %v, the cache counts %d", a.isMapped.Load(), b.isMapped.Load(), cfg.Maps.Mapped())
			}
			for i, s := range []*Segment{a, b} {
				ms, ok := s.NewestTime()
				if want := int64(t0 + 1000*i); !ok || ms != want {
					t.Fatalf("segment %d mapped again: NewestTime %d %v, want %d (the log's clock)", i, ms, ok, want)
				}
				if probs := s.VerifyIndex(); len(probs) > 0 {
					t.Fatalf("segment %d mapped again: %v", i, probs)
				}
				if from, to := s.Missing(); from != to {
					t.Fatalf("segment %d mapped again: [%d, %d) missing", i, from, to)
				}
				if id, ok := s.FirstID(); !ok || id != s.Base() {
					t.Fatalf("segment %d: FirstID %d %v", i, id, ok)
				}
			}
			readsHeld(t, b, wb)
			for _, s := range []*Segment{a, b} {
				if st, err := os.Stat(s.Path()); err != nil || st.Size() != s.End() {
					t.Fatalf("%s: %v, want %d bytes", s.Path(), err, s.End())
				}
			}
			for _, s := range []*Segment{a, b} {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if n := cfg.Maps.Mapped(); n != 0 {
				t.Fatalf("the cache counts %d segments after Close", n)
			}
			if testkit.IsMapped(t, a.Path()) || testkit.IsMapped(t, b.Path()) {
				t.Fatal("a closed segment's file is still mapped")
			}
		})
	}
}

// TestSealWhileHeldStaysMapped: a reader's reference and record, taken while
// the segment was active, keep it mapped across its seal and the seals of
// others; its bytes never change; the reader's Release lets the cache
// evict it down to its bound.
func TestSealWhileHeldStaysMapped(t *testing.T) {
	for _, ranges := range []bool{false, true} {
		t.Run(map[bool]string{false: "unmap", true: "ranges"}[ranges], func(t *testing.T) {
			cfg := testConfig(t, 4096, 256)
			cfg.Maps = &MapCache{Max: 1}
			if ranges {
				cfg.Ranges = addrspace.For("segment-test:" + t.Name())
			}
			a, err := Create(cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			wa := fill(t, a)
			if !a.Acquire() {
				t.Fatal("Acquire")
			}
			v, _, err := a.Read(3)
			if err != nil {
				t.Fatal(err)
			}
			held := v.Body
			if err := a.Seal(false); err != nil {
				t.Fatal(err)
			}
			var clock atomic.Int64
			segs := []*Segment{a}
			next := a.Next()
			for range 4 {
				s, _ := newSealed(t, cfg, next, &clock, 1, false)
				segs = append(segs, s)
				next = s.Next()
			}
			if !a.isMapped.Load() {
				t.Fatal("a held segment was evicted")
			}
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			if !bytes.Equal(held, body(3, bodyLen(3))) {
				t.Fatal("a held record changed")
			}
			a.Release()
			if a.isMapped.Load() || cfg.Maps.Mapped() != 1 {
				t.Fatalf("the reader's Release left %d mapped (held one mapped: %v), bound 1", cfg.Maps.Mapped(), a.isMapped.Load())
			}
			readsHeld(t, a, wa)
			for _, s := range segs {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if n := cfg.Maps.Mapped(); n != 0 {
				t.Fatalf("the cache counts %d segments after Close", n)
			}
		})
	}
}

// TestSealEmptyAndRecycledMapAgain: an empty sealed segment (a roll past
// lost offsets) and one sealed in a reused file (kept at its old size,
// zeros past the records) are evicted and mapped again: no error, their
// records, entries and missing ranges as before.
func TestSealEmptyAndRecycledMapAgain(t *testing.T) {
	cfg := testConfig(t, 4096, 256)
	cfg.Maps = &MapCache{Max: 1}
	cfg.KeepActiveSize = true
	var clock atomic.Int64
	clock.Store(5000)
	cfg.NowMillis = clock.Load
	empty, err := Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	empty.NoteSealTime()
	if err := empty.Seal(false); err != nil {
		t.Fatal(err)
	}
	empty.MissingUpTo(10)
	// A file handed on by a dropped segment, reused.
	old, _ := newSealed(t, cfg, 10, &clock, 6000, false)
	path := cfg.Dir + "/recycled.tmp"
	if err := os.Rename(old.Path(), path); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	old.RecycleTo(path, func(p string) { done <- p })
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	p := <-done
	r, err := PrepareRecycled(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Activate(500); err != nil {
		t.Fatal(err)
	}
	if r.keepSize == 0 {
		t.Fatal("a reused file without its old size kept")
	}
	// Fewer records than the old file held: zeros follow them.
	for id := uint64(500); id < 505; id++ {
		if _, _, err := r.Append(nil, body(id, bodyLen(id))); err != nil {
			t.Fatal(err)
		}
	}
	r.NoteSealTime()
	if err := r.Seal(false); err != nil {
		t.Fatal(err)
	}
	wr := written{base: 500}
	if !r.Acquire() {
		t.Fatal("Acquire")
	}
	for id := uint64(500); id < 505; id++ {
		_, pos, err := r.Read(id)
		if err != nil {
			t.Fatal(err)
		}
		wr.pos = append(wr.pos, pos)
		wr.sizes = append(wr.sizes, 0)
	}
	entries := r.idx.Load().entries()
	r.Release()
	other, _ := newSealed(t, cfg, 1000, &clock, 7000, false) // evicts both
	for round := range 3 {
		for _, s := range []*Segment{empty, r, other} {
			if !s.Acquire() {
				t.Fatal("Acquire")
			}
			if p := s.unreadable.Load(); p != nil {
				t.Fatalf("round %d: segment %d cannot be mapped again: %v", round, s.Base(), *p)
			}
			s.Release()
		}
		if from, to := empty.Missing(); from != 0 || to != 10 {
			t.Fatalf("round %d: the empty segment's missing range [%d, %d), want [0, 10)", round, from, to)
		}
		if ms, ok := empty.NewestTime(); !ok || ms != 5000 {
			t.Fatalf("round %d: the empty segment's NewestTime %d %v, want 5000", round, ms, ok)
		}
		if !r.Acquire() {
			t.Fatal("Acquire")
		}
		for i, id := range []uint64{500, 501, 502, 503, 504} {
			v, pos, err := r.Read(id)
			if err != nil || pos != wr.pos[i] || !bytes.Equal(v.Body, body(id, bodyLen(id))) {
				t.Fatalf("round %d: Read(%d) of the reused file: at %d %v", round, id, pos, err)
			}
		}
		if _, _, err := r.Read(505); err == nil {
			t.Fatal("a record past the end of the reused file's records")
		}
		if n := r.idx.Load().entries(); n != entries {
			t.Fatalf("round %d: %d index entries mapped again, %d before", round, n, entries)
		}
		if probs := r.VerifyIndex(); len(probs) > 0 {
			t.Fatalf("round %d: %v", round, probs)
		}
		r.Release()
	}
	for _, s := range []*Segment{empty, r, other} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := cfg.Maps.Mapped(); n != 0 {
		t.Fatalf("the cache counts %d segments after Close", n)
	}
}

// TestSealEvictConcurrentReaders: a writer creates, fills and seals
// segments one after the other (one kept mapped) while readers take
// references on sealed ones, read and hold records, and call the methods
// that pin a segment on their own; then every segment is closed, some
// while readers still hold them.
func TestSealEvictConcurrentReaders(t *testing.T) {
	for _, ranges := range []bool{false, true} {
		t.Run(map[bool]string{false: "unmap", true: "ranges"}[ranges], func(t *testing.T) {
			cfg := testConfig(t, 4096, 256)
			cfg.Maps = &MapCache{Max: 1}
			if ranges {
				cfg.Ranges = addrspace.For("segment-test:" + t.Name())
			}
			// dropped is set before the segment's MarkDropped: a
			// reader that finds it unset after a call knows the drop
			// had not begun when the call returned.
			type sealed struct {
				s       *Segment
				w       written
				dropped *atomic.Bool
			}
			var (
				mu     sync.Mutex
				list   []sealed
				stop   atomic.Bool
				wg     sync.WaitGroup
				failMu sync.Mutex
				failed string
			)
			fail := func(why string) {
				failMu.Lock()
				if failed == "" {
					failed = why
				}
				failMu.Unlock()
				stop.Store(true)
			}
			for g := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 4))
					type hold struct {
						s    *Segment
						id   uint64
						body []byte
					}
					var held []hold
					defer func() {
						for _, h := range held {
							h.s.Release()
						}
					}()
					for !stop.Load() {
						mu.Lock()
						if len(list) == 0 {
							mu.Unlock()
							continue
						}
						e := list[rng.IntN(len(list))]
						mu.Unlock()
						if !e.s.Acquire() {
							continue // closed meanwhile
						}
						// Dropped by the test before this reader's
						// reference was whole: its Acquire may have
						// found it dropping and unmapped, and then it
						// is not mapped again by name (see
						// ensureMapped): its reads say it left the log.
						// A reference taken before the drop keeps the
						// records readable.
						droppedFirst := e.dropped.Load()
						i := rng.IntN(len(e.w.sizes))
						id := e.w.base + uint64(i)
						v, _, err := e.s.Read(id)
						if droppedFirst && errors.Is(err, ErrNotFound) {
							e.s.Release()
							continue
						}
						if err != nil || !bytes.Equal(v.Body, body(id, bodyLen(id))) {
							fail("Read of a sealed segment: " + errString(err))
							e.s.Release()
							return
						}
						switch rng.IntN(4) {
						case 0:
							held = append(held, hold{e.s, id, v.Body})
						case 1:
							if probs := e.s.VerifyIndex(); len(probs) > 0 {
								fail(strings.Join(probs, "; "))
							}
							e.s.Release()
						default:
							e.s.Release()
						}
						if len(held) > 3 {
							h := held[0]
							held = held[1:]
							if !bytes.Equal(h.body, body(h.id, bodyLen(h.id))) {
								fail("a held record changed")
							}
							h.s.Release()
						}
						// Methods that pin the segment themselves, with
						// no reference of this reader's: the test may
						// drop and close it meanwhile, and then they
						// have nothing to look at.
						if _, ok := e.s.NewestTime(); !ok && !e.dropped.Load() {
							fail("no NewestTime")
						}
						e.s.Missing()
						e.s.FirstID()
					}
				}()
			}
			next := uint64(0)
			var all []*Segment
			for i := 0; i < 60 && !stop.Load(); i++ {
				s, err := Create(cfg, next)
				if err != nil {
					t.Fatal(err)
				}
				w := fill(t, s)
				s.NoteSealTime()
				if err := s.Seal(i%2 == 0); err != nil {
					t.Fatal(err)
				}
				next = s.Next()
				all = append(all, s)
				mu.Lock()
				list = append(list, sealed{s, w, new(atomic.Bool)})
				if len(list) > 6 { // the oldest go, readers may still hold them
					list[0].dropped.Store(true)
					list[0].s.MarkDropped()
					if err := list[0].s.Close(); err != nil {
						t.Fatal(err)
					}
					list = list[1:]
				}
				mu.Unlock()
			}
			stop.Store(true)
			wg.Wait()
			if failed != "" {
				t.Fatal(failed)
			}
			if n := cfg.Maps.Mapped(); n < 0 || n > 1 {
				t.Fatalf("the cache counts %d segments, bound 1, no reader left", n)
			}
			for _, e := range list {
				readsHeld(t, e.s, e.w)
				if err := e.s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if n := cfg.Maps.Mapped(); n != 0 {
				t.Fatalf("the cache counts %d segments after Close", n)
			}
			for _, s := range all {
				if testkit.IsMapped(t, s.Path()) {
					t.Fatalf("%s still mapped after Close", s.Path())
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "body differs"
	}
	return err.Error()
}
