package bench

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/stopwatch"
)

func openScratch(b *testing.B, opts engine.Options) *engine.Log {
	b.Helper()
	dir, err := os.MkdirTemp(scratch, "log-")
	if err != nil {
		b.Fatal(err)
	}
	l, err := engine.Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		l.Close()
		os.RemoveAll(dir)
	})
	return l
}

// BenchmarkAppend: sustained appends under SyncNone (OK once in the page
// cache), segment rolls included.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{64, 1024, 64 << 10} {
		b.Run("body="+sizeName(size), func(b *testing.B) {
			l := openScratch(b, engine.Options{})
			body := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := l.Append(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendLatency times every append and reports p50 and p99.
func BenchmarkAppendLatency(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run("body="+sizeName(size), func(b *testing.B) {
			l := openScratch(b, engine.Options{})
			body := make([]byte, size)
			lat := make(latencies, b.N)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := stopwatch.Start()
				if _, err := l.Append(body); err != nil {
					b.Fatal(err)
				}
				lat[i] = t.Elapsed()
			}
			b.StopTimer()
			lat.report(b)
		})
	}
}

// BenchmarkRead reads verified records (checksum and id) zero-copy: recent
// ones (the newest thousand) and old ones (anywhere in a 256 MiB log).
func BenchmarkRead(b *testing.B) {
	dir := fixtureRead.build(b)
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	n := uint64(fixtureRead.n)
	for _, age := range []string{"recent", "old"} {
		b.Run("age="+age, func(b *testing.B) {
			offs := make([]uint64, 4096)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range offs {
				if age == "recent" {
					offs[i] = n - 1 - rng.Uint64N(1000)
				} else {
					offs[i] = rng.Uint64N(n)
				}
			}
			b.SetBytes(int64(fixtureRead.size))
			b.ReportAllocs()
			b.ResetTimer()
			var sink byte
			for i := 0; i < b.N; i++ {
				r, err := l.Read(offs[i&4095])
				if err != nil {
					b.Fatal(err)
				}
				sink += r.Body[0]
				r.Release()
			}
			_ = sink
		})
	}
}

// BenchmarkReadLatency times every read of a recent record.
func BenchmarkReadLatency(b *testing.B) {
	dir := fixtureRead.build(b)
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	n := uint64(fixtureRead.n)
	b.Run("age=recent", func(b *testing.B) {
		lat := make(latencies, b.N)
		b.SetBytes(int64(fixtureRead.size))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			off := n - 1 - uint64(i%1000)
			t := stopwatch.Start()
			r, err := l.Read(off)
			if err != nil {
				b.Fatal(err)
			}
			r.Release()
			lat[i] = t.Elapsed()
		}
		b.StopTimer()
		lat.report(b)
	})
}

// BenchmarkScan iterates over every record of a 256 MiB log, verifying each.
func BenchmarkScan(b *testing.B) {
	dir := fixtureRead.build(b)
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.Run("log=256MiB", func(b *testing.B) {
		b.SetBytes(int64(fixtureRead.n) * int64(fixtureRead.size+16))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			count := 0
			for r, err := range l.Records(0) {
				if err != nil {
					b.Fatal(err)
				}
				count += len(r.Body) & 1
				count++
			}
			if count == 0 {
				b.Fatal("no records")
			}
		}
	})
}

// BenchmarkOpen opens a cleanly closed 1 GiB log (Close is not timed).
func BenchmarkOpen(b *testing.B) {
	dir := fixtureOpen.build(b)
	b.Run("log=1GiB", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			l, err := engine.Open(dir, engine.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if l.Next() != uint64(fixtureOpen.n) || !l.Recovery().Clean {
				b.Fatalf("next %d clean %v", l.Next(), l.Recovery().Clean)
			}
			b.StopTimer()
			l.Close() // writes the clean-close marker for the next round
			b.StartTimer()
		}
	})
}

// BenchmarkRecover opens a 1 GiB log after an unclean stop (no clean-close
// marker, as after kill -9): the recovery walk of the active segment, the
// zeroing of its tail and the index checks.
func BenchmarkRecover(b *testing.B) {
	dir := fixtureOpen.build(b)
	b.Run("log=1GiB", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if err := os.Remove(filepath.Join(dir, "log.clean")); err != nil && !os.IsNotExist(err) {
				b.Fatal(err)
			}
			b.StartTimer()
			l, err := engine.Open(dir, engine.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if l.Recovery().Clean || l.Next() != uint64(fixtureOpen.n) {
				b.Fatalf("clean %v next %d", l.Recovery().Clean, l.Next())
			}
			b.StopTimer()
			l.Close()
			b.StartTimer()
		}
	})
}
