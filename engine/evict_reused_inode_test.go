package engine

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// inodeReuseAll (-inodereuse.all) makes
// TestEvictTruncatedSegmentNotRemappedOnReusedInode log every bad read.
var inodeReuseAll = flag.Bool("inodereuse.all", false, "log every bad read instead of failing at the first")

// pathInode returns the inode of path (0 when it is not there).
func pathInode(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return testkit.Inode(st)
}

// inodeReuseBody is the body of a record at off of n bytes in generation gen.
func inodeReuseBody(off uint64, n int, gen uint32) []byte {
	b := testBody(off, n)
	b[8], b[9], b[10], b[11] = byte(gen>>24), byte(gen>>16), byte(gen>>8), byte(gen)
	return b
}

type inodeReuseRec struct {
	n   int
	gen uint32
}

// A reader took its reference on an evicted sealed segment (the first half
// of Acquire: Hold, as Log.Read does) and is descheduled; a Truncate
// removes the segment's file, and appends make a new segment under the
// same name. With the descriptor closed by the eviction nothing keeps the
// old inode, and the file system (ext4 here) gives its number to a later
// file: the new one under the segment's name passes the device/inode check
// of the mapping by name, and the dropped segment serves another file's
// bytes: records of a later generation, or ErrCorrupt for an offset the
// log holds (or no longer holds: ErrNotFound is what a cut record reads
// as). Each round cuts at the base of one of the newest segments, the
// record at the cut of the size it had, so that the segment before fills
// up there again and the name comes back. The subtest "opened" reopens the log at
// every round: the segments are then ones opened sealed, which never had
// a descriptor. Both fail without the rule that a dropped segment is never
// mapped again by name (ensureMapped).
func TestEvictTruncatedSegmentNotRemappedOnReusedInode(t *testing.T) {
	t.Run("rolled", func(t *testing.T) { runTruncatedInodeReused(t, false) })
	t.Run("opened", func(t *testing.T) { runTruncatedInodeReused(t, true) })
}

func runTruncatedInodeReused(t *testing.T, reopen bool) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1}
	l := mustOpen(t, dir, opts)
	defer func() { l.Close() }()
	recs := map[uint64]inodeReuseRec{}
	gen := uint32(1)
	rng := rand.New(rand.NewPCG(1, 2))
	add := func(n int) {
		t.Helper()
		off := l.Next()
		got, err := l.Append(inodeReuseBody(off, n, gen))
		if err != nil || got != off {
			t.Fatalf("Append(%d): %d, %v", off, got, err)
		}
		recs[off] = inodeReuseRec{n, gen}
	}
	for range 60 {
		add(100 + rng.IntN(400))
	}
	type heldSeg struct {
		s    *segment.Segment
		want map[uint64]inodeReuseRec
	}
	var held []heldSeg
	defer func() {
		for _, h := range held {
			h.s.Release()
		}
	}()
	hits := 0
	var corrupt, foreign string // the first read of each kind of failure
	deadline := time.Now().Add(20 * time.Second)
	for iter := 0; time.Now().Before(deadline) && corrupt == "" && hits < 30; iter++ {
		awaitBackgroundSeal(l)
		if reopen {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, dir, opts)
		}
		segs := *l.segs.Load()
		if r, err := l.Read(segs[0].Base()); err != nil { // maps the first: the others are evicted
			t.Fatal(err)
		} else {
			r.Release()
		}
		for _, s := range segs[1 : len(segs)-1] {
			if len(held) >= 300 || mappedLogNames(t, dir)[s.Path()[len(dir)+1:]] {
				continue
			}
			dup := false
			for _, h := range held {
				dup = dup || h.s == s
			}
			if dup || !s.Hold() { // a reader's Acquire, up to its mapping
				continue
			}
			want := map[uint64]inodeReuseRec{}
			for off := s.Base(); off < s.Next(); off++ {
				want[off] = recs[off]
			}
			held = append(held, heldSeg{s, want})
		}
		i := max(1, len(segs)-1-rng.IntN(min(4, len(segs)-1)))
		b := segs[i].Base()
		first := recs[b].n // the same size: the segment before fills up at b again
		if err := l.Truncate(b); err != nil {
			t.Fatal(err)
		}
		for off := range recs {
			if off >= b {
				delete(recs, off)
			}
		}
		gen++
		add(first)
		for range rng.IntN(40) {
			add(100 + rng.IntN(400))
		}
		for _, h := range held {
			s := h.s
			if pathInode(s.Path()) != s.FileID()[1] || l.listsSegment(s) {
				continue
			}
			hits++
			// The reader goes on: the rest of Acquire, then reads.
			if !s.Acquire() {
				t.Fatal("Acquire")
			}
			for off := s.Base(); off < s.Next(); off++ {
				v, _, err := s.Read(off)
				w := h.want[off]
				var why string
				switch {
				case err == nil && !bytes.Equal(v.Body, inodeReuseBody(off, w.n, w.gen)):
					cur := "not held by the log"
					if r, ok := recs[off]; ok && bytes.Equal(v.Body, inodeReuseBody(off, r.n, r.gen)) {
						cur = fmt.Sprintf("the record the log holds there now (generation %d)", r.gen)
					}
					why = fmt.Sprintf("%d bytes that are not the record it held (%d bytes, generation %d): %s", len(v.Body), w.n, w.gen, cur)
				case err != nil && (!errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt)):
					why = fmt.Sprintf("%v (the log holds [%d, %d))", err, l.First(), l.Next())
				}
				if why == "" {
					continue
				}
				msg := fmt.Sprintf("iteration %d: segment %d, cut by a Truncate, its file's inode %d now %s: Read(%d) gave %s",
					iter, s.Base(), s.FileID()[1], s.Path(), off, why)
				if *inodeReuseAll {
					t.Log(msg)
				} else if err != nil && corrupt == "" {
					corrupt = msg
				} else if err == nil && foreign == "" {
					foreign = msg
				}
			}
			s.Release()
		}
	}
	t.Logf("%d reuses of an inode under a dropped segment's name, %d segments held", hits, len(held))
	if corrupt != "" || foreign != "" {
		t.Fatalf("a dropped segment mapped again by name maps another file:\n%s\n%s", corrupt, foreign)
	}
}

// listsSegment reports whether s is in the log's list.
func (l *Log) listsSegment(s *segment.Segment) bool {
	for _, x := range *l.segs.Load() {
		if x == s {
			return true
		}
	}
	return false
}
