package bench

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/stopwatch"
)

// A log of 10,000 segments, built once per process: the bounded-mappings
// figures (Open without mapping sealed segments, random reads across all of
// them with at most MaxMappedSegments mapped).
var manySegs struct {
	once sync.Once
	dir  string
	n    int
	err  error
}

const manySegments = 10_000

func manySegmentLog(b *testing.B) (string, int) {
	b.Helper()
	manySegs.once.Do(func() {
		dir := filepath.Join(scratch, "many-segments")
		l, err := engine.Open(dir, engine.Options{SegmentBytes: 4096})
		if err != nil {
			manySegs.err = err
			return
		}
		body := make([]byte, 1000)
		for l.Stats().Segments < manySegments {
			if _, err := l.Append(body); err != nil {
				manySegs.err = err
				return
			}
		}
		manySegs.dir, manySegs.n = dir, int(l.Next())
		manySegs.err = l.Close()
	})
	if manySegs.err != nil {
		b.Fatal(manySegs.err)
	}
	return manySegs.dir, manySegs.n
}

// BenchmarkOpenManySegments opens a cleanly closed log of 10,000 segments
// (Close not timed) and reports the segments mapped after the open.
func BenchmarkOpenManySegments(b *testing.B) {
	dir, n := manySegmentLog(b)
	b.ReportAllocs()
	var mapped int
	for range b.N {
		l, err := engine.Open(dir, engine.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if l.Next() != uint64(n) || !l.Recovery().Clean {
			b.Fatalf("next %d clean %v", l.Next(), l.Recovery().Clean)
		}
		b.StopTimer()
		mapped = l.Stats().MappedSegments
		l.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(mapped), "mapped-segments")
}

// BenchmarkReadManySegments reads random records across 10,000 segments
// with the default bound of 128 mapped segments: most reads map a segment
// and evict another.
func BenchmarkReadManySegments(b *testing.B) {
	dir, n := manySegmentLog(b)
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	readRandom(b, l, uint64(n))
}

// readRandom times b.N reads of random records below n and reports their
// latencies and the segments mapped at the end.
func readRandom(b *testing.B, l *engine.Log, n uint64) {
	rng := rand.New(rand.NewPCG(1, 1))
	lat := make(latencies, 0, b.N)
	b.ResetTimer()
	for range b.N {
		off := rng.Uint64N(n)
		t := stopwatch.Start()
		r, err := l.Read(off)
		if err != nil {
			b.Fatal(err)
		}
		r.Release()
		lat = append(lat, t.Elapsed())
	}
	b.StopTimer()
	lat.report(b)
	b.ReportMetric(float64(l.Stats().MappedSegments), "mapped-segments")
}

// The same log of 10,000 segments written by the process that reads it,
// kept open: its segments were sealed by rolls, not opened sealed.
var rolledSegs struct {
	once sync.Once
	l    *engine.Log
	err  error
}

// BenchmarkReadManyRolledSegments reads random records across 10,000
// segments sealed by this process's rolls, with the default bound of 128
// mapped segments: most reads map a segment by name (an evicted segment
// gives its descriptor back) and evict another.
func BenchmarkReadManyRolledSegments(b *testing.B) {
	rolledSegs.once.Do(func() {
		dir := filepath.Join(scratch, "rolled-segments")
		if err := os.RemoveAll(dir); err != nil {
			rolledSegs.err = err
			return
		}
		l, err := engine.Open(dir, engine.Options{SegmentBytes: 4096})
		if err != nil {
			rolledSegs.err = err
			return
		}
		body := make([]byte, 1000)
		for l.Stats().Segments < manySegments {
			if _, err := l.Append(body); err != nil {
				rolledSegs.err = err
				return
			}
		}
		rolledSegs.l = l
	})
	if rolledSegs.err != nil {
		b.Fatal(rolledSegs.err)
	}
	readRandom(b, rolledSegs.l, rolledSegs.l.Next())
}

// BenchmarkOffsetForTimeManySegments asks the time index of the log of
// 10,000 segments for the newest records (what a queue's open asks 1,024
// times to rebuild its dedup window), with the default bound of 128 mapped
// segments. The first question after the open maps every segment once
// (first-ms); a sealed segment whose time index was read once is passed
// over without mapping it, so later questions (ns/op) map none.
func BenchmarkOffsetForTimeManySegments(b *testing.B) {
	dir, n := manySegmentLog(b)
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	at := time.Now()
	start := time.Now()
	if _, err := l.OffsetForTime(at); err != nil {
		b.Fatal(err)
	}
	first := time.Since(start)
	b.ResetTimer()
	for range b.N {
		off, err := l.OffsetForTime(at)
		if err != nil {
			b.Fatal(err)
		}
		if off > uint64(n) {
			b.Fatalf("OffsetForTime = %d, past the end %d", off, n)
		}
	}
	b.ReportMetric(float64(first.Microseconds())/1e3, "first-ms")
}
