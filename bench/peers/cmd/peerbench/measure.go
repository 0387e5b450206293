package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/bench/peers/internal/payload"
)

// kind is what a workload's operation does.
type kind int

const (
	kindAppend kind = iota // append one record
	kindRead               // read one recent record
	kindCycle              // send, receive and delete one message
)

// workload is one kind of operation measured on every system that has it.
type workload struct {
	ID      string // stable name in the JSON, the table and the chart
	Title   string
	Kind    kind
	Size    int  // body bytes
	Sync    bool // an fsync (or fdatasync) covers the record before OK
	Writers int  // goroutines doing operations at once
	maxOps  int  // cap per phase of one measurement
	split   bool // a separate untimed phase gives throughput and allocations
}

// readRecent: the read workloads pick among the newest readRecent records.
const readRecent = 1000

func workloads(cfg config) []workload {
	s := cfg.scale
	return []workload{
		{ID: "append-1KiB", Title: "append 1 KiB, page-cache durability", Kind: kindAppend, Size: 1024, Writers: 1, maxOps: 200_000 / s, split: true},
		{ID: "append-64B", Title: "append 64 B, page-cache durability", Kind: kindAppend, Size: 64, Writers: 1, maxOps: 500_000 / s, split: true},
		{ID: "append-sync-1w", Title: "append 1 KiB, fsync before OK, 1 writer", Kind: kindAppend, Size: 1024, Sync: true, Writers: 1, maxOps: 5_000 / s},
		{ID: "append-sync-64w", Title: "append 1 KiB, fsync before OK, 64 writers", Kind: kindAppend, Size: 1024, Sync: true, Writers: 64, maxOps: 40_000 / s},
		{ID: "read-recent", Title: "read a recent 1 KiB record (newest 1000)", Kind: kindRead, Size: 1024, Writers: 1, maxOps: 1_000_000 / s, split: true},
		{ID: "queue-cycle", Title: "work-queue cycle: send + receive + delete, 1 KiB", Kind: kindCycle, Size: 1024, Writers: 1, maxOps: 200_000 / s, split: true},
	}
}

// readRecords is how many records the read workloads' log holds.
func readRecords(cfg config) int { return 64 << 10 / cfg.scale }

// system is one storage engine under test.
type system struct {
	name  string
	setup string // how it is driven: the settings that matter
	// support returns "" when the system runs w, else why it cannot.
	support func(w workload) string
	// open opens a fresh instance in dir for one measurement of w (for a
	// read workload, filled with n records first).
	open func(w workload, dir string, n int) (*store, error)
}

func (s system) unsupported(w workload) string { return s.support(w) }

// store is one opened instance of a system, ready to measure.
type store struct {
	// do runs operation i (i counts from 0 in each phase). It is called
	// from w.Writers goroutines at once.
	do    func(i int) error
	close func() error
	note  string // how this workload is driven on this system, when it differs from the setup
}

// accum pools the figures of one system on one workload over the rounds.
type accum struct {
	lat     []time.Duration // every timed operation
	tpOps   int64           // operations of the throughput phases
	tpTime  time.Duration
	mallocs uint64
	bytes   uint64
	note    string
	err     error
}

// measure runs one round of w on s in a new directory and adds to a.
func measure(cfg config, w workload, s system, scratch string, a *accum) error {
	dir, err := os.MkdirTemp(scratch, s.name2()+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := s.open(w, dir, readRecords(cfg))
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	a.note = st.note
	err = phases(cfg, w, st, a)
	if cerr := st.close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return err
}

// phases warms up, then measures throughput and allocations (untimed
// operations, when w.split) and latencies (every operation timed).
func phases(cfg config, w workload, st *store, a *accum) error {
	warm := min(w.maxOps/20, 200)
	if _, _, err := loop(st, w.Writers, warm, 100*time.Millisecond, nil); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if w.split {
		before := memStats()
		n, el, err := loop(st, w.Writers, w.maxOps, cfg.phase, nil)
		after := memStats()
		if err != nil {
			return err
		}
		a.add(n, el, before, after)
	}
	lat := make([]time.Duration, w.maxOps)
	before := memStats()
	n, el, err := loop(st, w.Writers, w.maxOps, cfg.phase, lat)
	after := memStats()
	if err != nil {
		return err
	}
	if !w.split {
		a.add(n, el, before, after)
	}
	a.lat = append(a.lat, lat[:n]...)
	return nil
}

func (a *accum) add(n int64, el time.Duration, before, after runtime.MemStats) {
	a.tpOps += n
	a.tpTime += el
	a.mallocs += after.Mallocs - before.Mallocs
	a.bytes += after.TotalAlloc - before.TotalAlloc
}

func memStats() runtime.MemStats {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// loop runs up to max operations from writers goroutines, or until budget
// has passed, and returns how many ran and the wall time. When lat is not
// nil each operation is timed into lat[i].
func loop(st *store, writers, max int, budget time.Duration, lat []time.Duration) (int64, time.Duration, error) {
	var (
		next  atomic.Int64
		stop  atomic.Bool
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	timer := time.AfterFunc(budget, func() { stop.Store(true) })
	defer timer.Stop()
	start := time.Now()
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := next.Add(1) - 1
				if i >= int64(max) {
					return
				}
				var t time.Time
				if lat != nil {
					t = time.Now()
				}
				if err := st.do(int(i)); err != nil {
					once.Do(func() { first = fmt.Errorf("operation %d: %w", i, err) })
					stop.Store(true)
					return
				}
				if lat != nil {
					lat[i] = time.Since(t)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	return min(next.Load(), int64(max)), el, first
}

// result turns the pooled figures into a row of the report.
func (a *accum) result(s system, w workload) result {
	r := result{System: s.name, Workload: w.ID}
	if a == nil {
		r.Error = "not measured"
		return r
	}
	r.Note = a.note
	if a.err != nil {
		r.Error = a.err.Error()
	}
	if len(a.lat) == 0 || a.tpOps == 0 {
		if r.Error == "" {
			r.Error = "no operation completed"
		}
		return r
	}
	lat := slices.Clone(a.lat)
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	n := len(lat)
	r.Ops = a.tpOps
	r.P50ns = float64(lat[n/2].Nanoseconds())
	r.P99ns = float64(lat[n*99/100].Nanoseconds())
	r.P999ns = float64(lat[n*999/1000].Nanoseconds())
	r.MaxNs = float64(lat[n-1].Nanoseconds())
	r.MeanNs = float64(sum.Nanoseconds()) / float64(n)
	r.NsPerOp = float64(a.tpTime.Nanoseconds()) / float64(a.tpOps)
	r.OpsPerSec = float64(a.tpOps) / a.tpTime.Seconds()
	r.AllocsPerOp = float64(a.mallocs) / float64(a.tpOps)
	r.BytesPerOp = float64(a.bytes) / float64(a.tpOps)
	r.Samples = len(lat)
	return r
}

// name2 is the system's name made safe for a file name.
func (s system) name2() string {
	b := []byte(s.name)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// errUnsupported is returned by open for a workload the system lacks (it
// should have said so in support).
var errUnsupported = errors.New("unsupported workload")

// makeBody returns size bytes of fixed pseudo-random data (incompressible,
// the same for every system).
func makeBody(size int) []byte { return payload.Make(size) }

// recentPicks returns 4096 record numbers, pseudo-random among the newest
// readRecent of n records (numbered from 0).
func recentPicks(n int) []int {
	rng := rand.New(rand.NewPCG(1, 2))
	k := min(readRecent, n)
	picks := make([]int, 4096)
	for i := range picks {
		picks[i] = n - 1 - rng.IntN(k)
	}
	return picks
}

// sink keeps the reads' bytes alive, so that no read is optimized away
// (reads run from one goroutine).
var sink byte

// touch checks a read body's length and reads its first byte.
func touch(b []byte, size int) error {
	if len(b) != size {
		return fmt.Errorf("read %d bytes, want %d", len(b), size)
	}
	sink += b[0]
	return nil
}
