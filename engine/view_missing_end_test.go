package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
)

// followerConvergesOnWriter waits until the reader's Next is the writer's,
// then checks that the reader serves exactly what the writer serves from
// the reader's First on: the same body for each offset the writer reads,
// an error for each it does not (Read, Records and Inspect alike), and
// that Inspect covers every offset once.
func followerConvergesOnWriter(t *testing.T, when string, w, ro *Log) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for ro.Next() != w.Next() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the reader's Next stays %d, the writer's is %d", when, ro.Next(), w.Next())
		}
		time.Sleep(2 * time.Millisecond)
	}
	from := max(ro.First(), w.First())
	iterated := map[uint64][]byte{}
	for r, err := range ro.Records(from) {
		if err != nil {
			continue
		}
		iterated[r.Offset] = bytes.Clone(r.Body)
	}
	for off := from; off < w.Next(); off++ {
		wr, werr := w.Read(off)
		rr, rerr := ro.Read(off)
		switch {
		case werr == nil && rerr != nil:
			t.Fatalf("%s: Read(%d): the writer serves it, the reader says %v", when, off, rerr)
		case werr != nil && rerr == nil:
			t.Fatalf("%s: Read(%d): the reader serves %q, the writer says %v", when, off, rr.Body, werr)
		case werr == nil && !bytes.Equal(wr.Body, rr.Body):
			t.Fatalf("%s: Read(%d): the reader serves %q, the writer %q", when, off, rr.Body, wr.Body)
		}
		if b, ok := iterated[off]; ok != (werr == nil) || ok && !bytes.Equal(b, wr.Body) {
			t.Fatalf("%s: Records gives offset %d: %v (%q); the writer's Read: %v", when, off, ok, b, werr)
		}
		if werr == nil {
			wr.Release()
			rr.Release()
		}
	}
	n := uint64(0)
	expect := from
	for in := range ro.Inspect(from) {
		if in.Offset != expect {
			t.Fatalf("%s: Inspect gives offset %d after %d", when, in.Offset, expect)
		}
		if in.Missing > 0 {
			n += in.Missing
			expect += in.Missing
			continue
		}
		n++
		expect++
	}
	if n != ro.Next()-from {
		t.Fatalf("%s: Inspect covers %d offsets from %d, the reader's Next is %d", when, n, from, ro.Next())
	}
}

// loseNewestSegmentLastRecord closes w and replaces the last record of the
// segment at base with a whole record carrying the offset after it (as the
// fuzz case did): log.clean says the log reached past what the file holds.
func loseNewestSegmentLastRecord(t *testing.T, dir string, base uint64, lastPos int64) {
	t.Helper()
	path := segPath(dir, base, segment.LogSuffix)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := record.Decode(data[lastPos:], 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	stale := record.Append(bytes.Clone(data[:lastPos]), v.ID+1, nil, []byte("stale bytes"))
	if err := os.WriteFile(path, stale, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestViewEndingMissingFollowsWriter: a reader opened on a log
// whose newest segment ends in a missing range (log.clean says it reached
// further than the file holds, and stale bytes follow) must converge on
// what the writer serves through the writer's reopen, appends, rolls,
// SkipTo and a Truncate within the newest segment: never a record the
// writer does not serve, every record it appends after it reopens.
func TestViewEndingMissingFollowsWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sealed int // sealed segments before the damaged newest one
	}{{"one segment", 0}, {"after sealed ones", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 2048}
			l := mustOpen(t, dir, opts)
			for len(*l.segs.Load()) < tc.sealed+1 {
				appendN(t, l, 1, func(uint64) int { return 100 })
			}
			appendN(t, l, 4, func(uint64) int { return 20 })
			newest := l.active
			lastPos := newest.End()
			appendN(t, l, 1, func(uint64) int { return 20 })
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			loseNewestSegmentLastRecord(t, dir, newest.Base(), lastPos)

			ro := mustOpenRO(t, dir, opts)
			lost := ro.Next() - 1
			if r, err := ro.Read(lost); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read(%d) of the lost offset: %v, want ErrCorrupt", lost, err)
				r.Release()
			}
			before := ro.Next()
			if ro.Next() != before {
				t.Fatalf("a look for appends moved Next from %d to %d", before, ro.Next())
			}

			w := mustOpen(t, dir, opts)
			if w.Next() != before {
				t.Fatalf("the writer reopened at %d, the reader's Next is %d", w.Next(), before)
			}
			followerConvergesOnWriter(t, "writer reopened", w, ro)
			appendN(t, w, 3, func(uint64) int { return 50 })
			followerConvergesOnWriter(t, "appended", w, ro)
			for range 3 {
				appendN(t, w, 30, func(uint64) int { return 100 }) // rolls
				followerConvergesOnWriter(t, "rolled", w, ro)
			}
			if err := w.SkipTo(w.Next() + 5); err != nil {
				t.Fatal(err)
			}
			appendN(t, w, 4, func(uint64) int { return 30 })
			followerConvergesOnWriter(t, "skipped and appended", w, ro)
			if err := w.Truncate(w.Next() - 2); err != nil {
				t.Fatal(err)
			}
			w.Append(fmt.Appendf(nil, "after the cut at %d", w.Next()))
			followerConvergesOnWriter(t, "cut within the newest segment and appended", w, ro)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w = mustOpen(t, dir, opts)
			appendN(t, w, 40, func(uint64) int { return 100 })
			followerConvergesOnWriter(t, "reopened again and appended", w, ro)
			if v, err := ro.Verify(nil); err != nil || v.Damaged != 0 {
				t.Fatalf("the reader's Verify: %+v, %v", v, err)
			}
		})
	}
}
