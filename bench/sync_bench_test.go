package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/mmapfile"
)

// BenchmarkAppendSync: appends of 1 KiB under SyncAlways (OK only after an
// fdatasync covers the record) from 1, 8 and 64 goroutines at once. Group
// commit lets concurrent appenders share one fdatasync. ns/op is wall time
// per append across all appenders; p50/p99 are per-append latencies.
func BenchmarkAppendSync(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("appenders=%d", n), func(b *testing.B) {
			l := openScratch(b, engine.Options{Sync: engine.SyncAlways})
			body := make([]byte, 1024)
			lat := make(latencies, b.N)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.SetBytes(1024)
			b.ReportAllocs()
			b.ResetTimer()
			for g := 0; g < n; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						t := time.Now()
						if _, err := l.Append(body); err != nil {
							b.Error(err)
							return
						}
						lat[i] = time.Since(t)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			lat.report(b)
		})
	}
}

// BenchmarkFdatasync is the machine's limit for a synced append: write 4 KiB
// then fdatasync, into a file grown by each write ("extend"), into
// fallocated but never written blocks ("fallocated"), and over blocks
// written before ("overwrite").
func BenchmarkFdatasync(b *testing.B) {
	for _, mode := range []string{"extend", "fallocated", "overwrite"} {
		b.Run("mode="+mode, func(b *testing.B) {
			f, err := os.Create(filepath.Join(scratch, "fdatasync-"+mode))
			if err != nil {
				b.Fatal(err)
			}
			defer os.Remove(f.Name())
			defer f.Close()
			const area = 64 << 20
			switch mode {
			case "fallocated":
				if err := mmapfile.Allocate(f, 0, area); err != nil {
					b.Fatal(err)
				}
			case "overwrite":
				zero := make([]byte, 1<<20)
				for off := int64(0); off < area; off += int64(len(zero)) {
					if _, err := f.WriteAt(zero, off); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			block := make([]byte, 4096)
			lat := make(latencies, b.N)
			b.SetBytes(4096)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := time.Now()
				off := int64(i) * 4096 % area
				if mode == "extend" {
					off = int64(i) * 4096
				}
				if _, err := f.WriteAt(block, off); err != nil {
					b.Fatal(err)
				}
				if err := mmapfile.Datasync(f); err != nil {
					b.Fatal(err)
				}
				lat[i] = time.Since(t)
			}
			b.StopTimer()
			lat.report(b)
		})
	}
}
