package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/mmapfile"
)

// Small segments: files grown in quarter-segment steps, index files sized
// for SegmentBytes, prepared segments allocated a quarter ahead. These
// tests take them through segment sizes below a page and around it,
// records larger than a segment, tiny and huge index spacings, reopens
// with other sizes, crashes, full disks, reuse, Truncate, batches and
// read-only logs following the writer.

// verifyHealthy fails the test unless Verify finds nothing wrong.
func verifyHealthy(t *testing.T, l *Log, what string) {
	t.Helper()
	rep, err := l.Verify(nil)
	if err != nil {
		t.Fatalf("%s: Verify: %v", what, err)
	}
	if !rep.Healthy() {
		t.Errorf("%s: Verify: damaged %d, missing %d, problems %q, index problems %q",
			what, rep.Damaged, rep.Missing, rep.Problems, rep.IndexProblems)
	}
}

// checkHealthy reads every record of sizes from first (checkAll) and
// verifies the log.
func checkHealthy(t *testing.T, l *Log, first uint64, sizes []int, what string) {
	t.Helper()
	checkAll(t, l, first, sizes)
	verifyHealthy(t, l, what)
}

// checkFollower checks that a read-only log following the writer has
// caught up with sizes' records, reads them all and verifies.
func checkFollower(t *testing.T, ro *Log, sizes []int, what string) {
	t.Helper()
	if ro.Next() != uint64(len(sizes)) {
		t.Fatalf("%s: at %d, want %d", what, ro.Next(), len(sizes))
	}
	checkHealthy(t, ro, 0, sizes, what)
}

// smallSegSize is a body size for a log of segBytes segments: up to a
// third of a segment, and larger than a whole segment for the first
// record and about one in seven.
func smallSegSize(segBytes int64) func(uint64) int {
	return func(off uint64) int {
		x := (off + 3) * 0x9E3779B97F4A7C15
		x ^= x >> 31
		if off == 0 || x%7 == 0 {
			return int(segBytes) + int(x>>8%64)
		}
		return int(x >> 8 % uint64(segBytes/3+1))
	}
}

// checkTimes checks that OffsetForTime never answers past a record
// appended at or after the time asked: record o was appended at ms0+o.
func checkTimes(t *testing.T, l *Log, ms0 int64, n int) {
	t.Helper()
	for o := range n {
		got, err := l.OffsetForTime(time.UnixMilli(ms0 + int64(o)))
		if err != nil {
			t.Fatalf("OffsetForTime(%d): %v", o, err)
		}
		if got > uint64(o) {
			t.Fatalf("OffsetForTime(the append time of %d) = %d: late", o, got)
		}
	}
}

// Segment sizes from 1 byte to a few pages, index spacings of 1 byte and
// the default, records larger than a segment (the first one too): the
// roll rule, the sparse rule, every record by Read and Records, on the
// writer and on a read-only log following it, OffsetForTime, Verify;
// again after a clean close and after a crash.
func TestSmallSegmentsRules(t *testing.T) {
	for _, segBytes := range []int64{1, 100, 4095, 4096, 4097, 8191} {
		for _, interval := range []int{1, 0} {
			t.Run(fmt.Sprintf("seg%d-idx%d", segBytes, interval), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				const ms0 = 1_700_000_000_000
				var clock atomic.Int64
				clock.Store(ms0)
				opts := Options{SegmentBytes: segBytes, IndexIntervalBytes: interval}
				opts.now = func() time.Time { return time.UnixMilli(clock.Load()) }
				size := smallSegSize(segBytes)
				l := mustOpen(t, dir, opts)
				sizes := appendN(t, l, 1, size)
				clock.Add(1)
				ro := mustOpenRO(t, dir, Options{})
				const n = 120
				for len(sizes) < n {
					sizes = append(sizes, appendN(t, l, 1, size)...)
					clock.Add(1)
					if len(sizes)%17 == 0 {
						if ro.Next() != uint64(len(sizes)) {
							t.Fatalf("follower at %d, want %d", ro.Next(), len(sizes))
						}
						checkRead(t, ro, uint64(len(sizes)-1), sizes[len(sizes)-1]-headerSize)
					}
				}
				if err := l.Sync(); err != nil { // waits for the last seal
					t.Fatal(err)
				}
				segs := checkLayout(t, dir, 0, sizes, segBytes)
				stored := interval
				if stored == 0 {
					stored = DefaultIndexIntervalBytes
				}
				checkIndexFiles(t, dir, segs, stored, len(segs)-1)
				checkHealthy(t, l, 0, sizes, "writer")
				checkTimes(t, l, ms0, n)
				checkFollower(t, ro, sizes, "follower")
				checkTimes(t, ro, ms0, n)

				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = mustOpen(t, dir, opts)
				if !l.Recovery().Clean {
					t.Errorf("the open after Close is not clean: %+v", l.Recovery())
				}
				sizes = append(sizes, appendN(t, l, 20, size)...)
				checkHealthy(t, l, 0, sizes, "reopened")
				crashClose(t, l)
				l = mustOpen(t, dir, opts)
				checkHealthy(t, l, 0, sizes, "after a crash")
				sizes = append(sizes, appendN(t, l, 20, size)...)
				checkAll(t, l, 0, sizes)
				checkFollower(t, ro, sizes, "follower at the end")
			})
		}
	}
}

// A log reopened with another SegmentBytes each time (smaller than its
// active segment's records, 1 byte, larger), after a clean close or a
// crash, followed by a read-only log all along: every record reads back
// on both, and Verify calls both healthy.
func TestSmallSegmentsSizeChanges(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			size := func(off uint64) int { return mixedSize(off) % 300 }
			l := mustOpen(t, dir, Options{SegmentBytes: 64 << 10})
			sizes := appendN(t, l, 400, size) // the active segment ends past 4 KiB
			ro := mustOpenRO(t, dir, Options{})
			for i, sb := range []int64{4096, 1, 64 << 10, 5000, 4096, 1 << 20} {
				if crash {
					crashClose(t, l)
				} else if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = mustOpen(t, dir, Options{SegmentBytes: sb})
				what := fmt.Sprintf("reopen %d (SegmentBytes %d)", i, sb)
				checkHealthy(t, l, 0, sizes, what)
				sizes = append(sizes, appendN(t, l, 150, size)...)
				checkHealthy(t, l, 0, sizes, what+", appended")
				checkFollower(t, ro, sizes, what+", follower")
			}
		})
	}
}

// Appends racing the rolls of tiny segments (through the mapping and with
// pwrite), read beside them by readers of the writer's log and of a
// read-only log following it.
func TestSmallSegmentsRacingReaders(t *testing.T) {
	for _, c := range []struct {
		policy   SyncPolicy
		segBytes int64
		total    int
	}{{SyncNone, 1, 80}, {SyncNone, 4096, 150}, {SyncNone, 4097, 150}, {SyncAlways, 4097, 60}} {
		t.Run(fmt.Sprintf("%v-seg%d", c.policy, c.segBytes), func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: c.segBytes, Sync: c.policy})
			size := smallSegSize(c.segBytes)
			if _, err := l.Append(testBody(0, size(0))); err != nil {
				t.Fatal(err)
			}
			ro := mustOpenRO(t, dir, Options{})
			check := func(off uint64, body []byte) bool { return bytes.Equal(body, testBody(off, size(off))) }
			done := make(chan struct{})
			var wg sync.WaitGroup
			for i, r := range []*Log{l, ro, ro} {
				spawn(&wg, func() { reader(t, r, uint64(i), done, 20, check) })
			}
			spawn(&wg, func() {
				defer close(done)
				for range c.total {
					want := l.Next()
					if off, err := l.Append(testBody(want, size(want))); err != nil || off != want {
						t.Errorf("Append: %d, %v; want %d", off, err, want)
						return
					}
				}
			})
			wg.Wait()
			verifyHealthy(t, ro, "follower")
			verifyHealthy(t, l, "writer")
		})
	}
}

// A full disk while a small segment's file grows (its next quarter, or
// the page a record past the last one needs) fails the append that needs
// it and writes nothing; appends go on once there is space, and the
// follower, Verify and a reopen after a crash see every record.
func TestSmallSegmentsFullDisk(t *testing.T) {
	for _, segBytes := range []int64{4097, 16 << 10, 100 << 10} {
		t.Run(fmt.Sprint(segBytes), func(t *testing.T) {
			dir := t.TempDir()
			var full atomic.Bool
			opts := Options{SegmentBytes: segBytes}
			opts.allocate = func(f *os.File, off, n int64) error {
				if full.Load() && strings.HasSuffix(f.Name(), segment.LogSuffix) {
					return syscall.ENOSPC
				}
				return mmapfile.Allocate(f, off, n)
			}
			l := mustOpen(t, dir, opts)
			ro := mustOpenRO(t, dir, Options{})
			size := func(off uint64) int { return mixedSize(off) % 700 }
			sizes := appendN(t, l, 30, size)
			inside := 0 // failures with room left in the active segment
			for round := range 5 {
				full.Store(true)
				for {
					want := l.Next()
					off, err := l.Append(testBody(want, size(want)))
					if err != nil {
						if !errors.Is(err, syscall.ENOSPC) {
							t.Fatalf("round %d: %v, want ENOSPC", round, err)
						}
						if l.active.End()+int64(headerSize+size(want)) <= segBytes {
							inside++
						}
						break
					}
					if off != want {
						t.Fatalf("Append: %d, want %d", off, want)
					}
					sizes = append(sizes, headerSize+size(want))
				}
				if l.Next() != uint64(len(sizes)) {
					t.Fatalf("round %d: Next %d after a failed append, want %d", round, l.Next(), len(sizes))
				}
				checkAll(t, l, 0, sizes)
				full.Store(false)
				sizes = append(sizes, appendN(t, l, 7+round*13, size)...)
			}
			if segBytes >= 16<<10 && inside == 0 {
				t.Errorf("no append failed inside a segment: the test missed the growth steps")
			}
			checkHealthy(t, l, 0, sizes, "writer")
			checkFollower(t, ro, sizes, "follower")
			crashClose(t, l)
			l = mustOpen(t, dir, Options{})
			checkHealthy(t, l, 0, sizes, "reopened")
		})
	}
}

// Small segments dropped and their files reused, at every phase of their
// fill; the log reopened after.
func TestSmallSegmentsRecycled(t *testing.T) {
	for _, segBytes := range []int64{1, 4096, 4097, 6000} {
		t.Run(fmt.Sprint(segBytes), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{SegmentBytes: segBytes, RecycleSegments: 2}
			l := mustOpen(t, dir, o)
			size := smallSegSize(segBytes)
			var sizes []int
			for round := range 30 {
				sizes = append(sizes, appendN(t, l, 3+round%5, size)...)
				if round%3 == 2 {
					if _, err := l.DropBefore(l.Next() - uint64(round%4)); err != nil {
						t.Fatal(err)
					}
				}
				first := l.First()
				checkAll(t, l, first, sizes[first:])
			}
			verifyHealthy(t, l, "writer")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, dir, o)
			first := l.First()
			checkHealthy(t, l, first, sizes[first:], "reopened")
			sizes = append(sizes, appendN(t, l, 40, size)...)
			checkHealthy(t, l, first, sizes[first:], "reopened, appended")
		})
	}
}

// Truncate of small segments: inside the active one, inside a sealed one,
// at a segment's base, at a record larger than a segment; a read-only log
// following the writer throughout, and a reopen after a crash.
func TestSmallSegmentsTruncate(t *testing.T) {
	for _, segBytes := range []int64{1, 4096, 4097, 8191} {
		t.Run(fmt.Sprint(segBytes), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{SegmentBytes: segBytes}
			l := mustOpen(t, dir, o)
			ro := mustOpenRO(t, dir, Options{})
			size := smallSegSize(segBytes)
			sizes := appendN(t, l, 120, size)
			for i, at := range []uint64{119, 100, 77, 60, 1, 0} {
				if err := l.Truncate(at); err != nil {
					t.Fatalf("Truncate(%d): %v", at, err)
				}
				sizes = sizes[:at]
				checkHealthy(t, l, 0, sizes, fmt.Sprintf("truncated at %d", at))
				sizes = append(sizes, appendN(t, l, 5+i*3, size)...)
				checkHealthy(t, l, 0, sizes, fmt.Sprintf("truncated at %d, appended", at))
			}
			if ro.Next() != uint64(len(sizes)) {
				t.Fatalf("follower at %d, want %d", ro.Next(), len(sizes))
			}
			checkFollower(t, ro, sizes, "follower")
			crashClose(t, l)
			l = mustOpen(t, dir, o)
			checkHealthy(t, l, 0, sizes, "reopened")
		})
	}
}

// Batches across tiny segments, through the mapping and with pwrite: the
// roll rule record by record, the sparse rule, every record read back.
func TestSmallSegmentsBatches(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncAlways} {
		for _, segBytes := range []int64{1, 4096, 4097, 10000} {
			t.Run(fmt.Sprintf("%v-seg%d", policy, segBytes), func(t *testing.T) {
				dir := t.TempDir()
				l := mustOpen(t, dir, Options{SegmentBytes: segBytes, Sync: policy, IndexIntervalBytes: 100})
				size := smallSegSize(segBytes)
				var sizes []int
				for b := range 25 {
					var bodies [][]byte
					for range 1 + b%9 {
						off := uint64(len(sizes) + len(bodies))
						bodies = append(bodies, testBody(off, size(off)))
					}
					first, n, err := l.AppendBatch(bodies, nil)
					if err != nil || n != len(bodies) || first != uint64(len(sizes)) {
						t.Fatalf("AppendBatch: %d, %d, %v; want %d, %d", first, n, err, len(sizes), len(bodies))
					}
					for _, body := range bodies {
						sizes = append(sizes, headerSize+len(body))
					}
				}
				if err := l.Sync(); err != nil { // waits for the last seal
					t.Fatal(err)
				}
				segs := checkLayout(t, dir, 0, sizes, segBytes)
				checkIndexFiles(t, dir, segs, 100, len(segs)-1)
				checkHealthy(t, l, 0, sizes, "batches")
			})
		}
	}
}
