package bench

import (
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/stopwatch"
)

// The append tail: 1 GiB of 1 KiB appends into a fresh log under SyncNone,
// every append timed, beside the kernel's own write paths into a fresh
// file on the same disk. Run with -benchtime 1x: one operation is the whole
// gigabyte, and the metrics are over its 1,048,576 appends (or writes).
//
//	go test -run '^$' -bench AppendTail -benchtime 1x -count 10 ./bench/
const (
	tailTotal  = 1 << 30
	tailRecord = 1 << 10
)

// tailStats reports the percentiles of lat, the rate of the whole run and
// how many operations took over 1 ms.
func tailStats(b *testing.B, lat latencies, total int64, wall time.Duration) {
	b.Helper()
	lat.report(b)
	saveLatencies(b, lat)
	over := 0
	for _, d := range lat {
		if d > time.Millisecond {
			over++
		}
	}
	b.ReportMetric(float64(over)/float64(b.N), "over-1ms/op")
	b.ReportMetric(float64(total)/wall.Seconds()/1e6, "MB/s")
}

// BenchmarkAppendTail: pagelog Append of 1 KiB bodies, 1 GiB into a fresh
// log; and the baselines, in the same run:
//   - pwrite-record: one pwrite(2) of a 1 KiB record (header and checksum
//     made as pagelog makes them) per append, into a fresh file;
//   - pwrite-1MiB: the kernel's bulk ingest, 1 MiB pwrites into a fresh
//     file (the latencies are per 1 MiB write);
//   - copy-crc: copy and CRC-32C of 1 KiB into resident memory, the noise
//     floor of the machine.
func BenchmarkAppendTail(b *testing.B) {
	b.Run("path=pagelog", func(b *testing.B) {
		var vm vmDelta
		defer vm.report(b)
		body := make([]byte, tailRecord)
		n := tailTotal / (tailRecord + 16)
		lat := make(latencies, 0, n*b.N)
		var wall time.Duration
		for range b.N {
			b.StopTimer()
			dir := freshDir(b, "tail-")
			l, err := engine.Open(dir, engine.Options{})
			if err != nil {
				b.Fatal(err)
			}
			before := readVMStat()
			b.StartTimer()
			start := time.Now()
			for i := 0; i < n; i++ {
				t := stopwatch.Start()
				if _, err := l.Append(body); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, t.Elapsed())
			}
			wall += time.Since(start)
			b.StopTimer()
			vm.add(before, readVMStat())
			_ = l.Close()
			_ = os.RemoveAll(dir)
			b.StartTimer()
		}
		b.SetBytes(int64(n) * (tailRecord + 16))
		tailStats(b, lat, int64(n)*(tailRecord+16)*int64(b.N), wall)
		reportCauses(b, lat, n)
	})
	b.Run("path=pwrite-record", func(b *testing.B) {
		rec := make([]byte, tailRecord+16)
		writeTail(b, "tail-pwrite", len(rec), func(f *os.File, i int) error {
			putRecord(rec, uint64(i))
			_, err := f.WriteAt(rec, int64(i)*int64(len(rec)))
			return err
		})
	})
	b.Run("path=pwrite-1MiB", func(b *testing.B) {
		chunk := make([]byte, 1<<20)
		writeTail(b, "tail-bulk", len(chunk), func(f *os.File, i int) error {
			_, err := f.WriteAt(chunk, int64(i)*int64(len(chunk)))
			return err
		})
	})
	b.Run("path=copy-crc", func(b *testing.B) {
		const ring = 64 << 20
		mem := make([]byte, ring)
		for i := range mem {
			mem[i] = 1 // resident
		}
		body := make([]byte, tailRecord)
		rec := tailRecord + 16
		n := tailTotal / rec
		lat := make(latencies, 0, n*b.N)
		var wall time.Duration
		var sink uint32
		for range b.N {
			start := time.Now()
			for i := 0; i < n; i++ {
				t := stopwatch.Start()
				at := (i * rec) % (ring - rec)
				copy(mem[at+16:], body)
				sink += crc32.Checksum(mem[at+8:at+rec], castagnoli)
				lat = append(lat, t.Elapsed())
			}
			wall += time.Since(start)
		}
		_ = sink
		b.SetBytes(int64(n * rec))
		tailStats(b, lat, int64(n*rec)*int64(b.N), wall)
	})
}

// warmPageCache writes a file of tailTotal bytes and removes it, so that
// the path timed next finds as much memory freed and ready as the others
// do. Measured on the project's machine (a virtual machine whose host takes
// back memory the guest frees): memory the guest has not used lately costs
// a host fault per page on first touch, about 200 MB/s where memory in use
// is touched at 16 GB/s, and a file written into it is written at that
// rate whatever the path. Without this, whichever path ran first paid for
// the others.
func warmPageCache(b *testing.B) {
	b.Helper()
	path := filepath.Join(scratch, "tail-warm")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for off := int64(0); off < tailTotal; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk, off); err != nil {
			b.Fatal(err)
		}
	}
	_ = f.Close()
	_ = os.Remove(path)
}

// freshDir warms the page cache (warmPageCache) and returns a new
// directory under scratch for the path timed next.
func freshDir(b *testing.B, prefix string) string {
	b.Helper()
	warmPageCache(b)
	dir, err := os.MkdirTemp(scratch, prefix)
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

// writeTail times tailTotal bytes of writes of size bytes each (write(f, i)
// writes the i-th) into a fresh file named name, once per iteration, and
// reports the tail of the per-write latencies.
func writeTail(b *testing.B, name string, size int, write func(f *os.File, i int) error) {
	n := tailTotal / size
	lat := make(latencies, 0, n*b.N)
	var wall time.Duration
	for range b.N {
		b.StopTimer()
		warmPageCache(b)
		f, err := os.Create(filepath.Join(scratch, name))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		for i := 0; i < n; i++ {
			t := stopwatch.Start()
			if err := write(f, i); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, t.Elapsed())
		}
		wall += time.Since(start)
		b.StopTimer()
		_ = f.Close()
		_ = os.Remove(f.Name())
		b.StartTimer()
	}
	b.SetBytes(int64(n * size))
	tailStats(b, lat, int64(n*size)*int64(b.N), wall)
}

// putRecord lays a record's header over rec (length, checksum, id) around
// its body, as pagelog writes one.
func putRecord(rec []byte, id uint64) {
	beUint32(rec[0:], uint32(len(rec)-4))
	beUint64(rec[8:], id)
	beUint32(rec[4:], crc32.Checksum(rec[8:], castagnoli))
}

func beUint32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func beUint64(b []byte, v uint64) {
	beUint32(b, uint32(v>>32))
	beUint32(b[4:], uint32(v))
}

// The evidence for where the slow appends come from: each slow append is
// put in one class (it rolled the segment, or not), and the kernel's
// counters of the whole run (page faults, compaction stalls, large-folio
// allocations, dirty throttling) are reported per run.

// rollEvery is how many 1 KiB appends fill a 64 MiB segment under the roll
// rule (a record of 1,040 bytes rolls when it would cross 64 MiB).
const rollEvery = (64 << 20) / (tailRecord + 16)

// reportCauses reports the slowest append that rolled a segment, and how
// many appends over 100 µs rolled and did not.
func reportCauses(b *testing.B, lat latencies, n int) {
	var rollMax time.Duration
	var slowRoll, slowOther int
	for i, d := range lat {
		roll := i%n > 0 && i%n%rollEvery == 0
		if roll {
			rollMax = max(rollMax, d)
		}
		if d > 100*time.Microsecond {
			if roll {
				slowRoll++
			} else {
				slowOther++
			}
		}
	}
	b.ReportMetric(float64(rollMax.Nanoseconds()), "roll-max-ns")
	b.ReportMetric(float64(slowRoll)/float64(b.N), "slow-roll/op")
	b.ReportMetric(float64(slowOther)/float64(b.N), "slow-other/op")
}

var vmCounters = []string{"pgfault", "compact_stall", "compact_fail", "thp_fault_alloc", "pgsteal_direct", "allocstall_normal", "nr_dirtied"}

func readVMStat() map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok {
			out[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out
}

// vmDelta sums the growth of the kernel's counters over the runs.
type vmDelta struct {
	d    map[string]int64
	runs int
}

func (v *vmDelta) add(before, after map[string]int64) {
	if v.d == nil {
		v.d = map[string]int64{}
	}
	for _, k := range vmCounters {
		v.d[k] += after[k] - before[k]
	}
	v.runs++
}

func (v *vmDelta) report(b *testing.B) {
	if v.runs == 0 {
		return
	}
	for _, k := range vmCounters {
		b.ReportMetric(float64(v.d[k])/float64(v.runs), k+"/op")
	}
}
