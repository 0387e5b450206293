package main

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/stopwatch"
)

func runBench(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("bench", "[--dir D]",
		"Measures a short version of pagelog's own figures on this machine and the\n"+
			"disk that holds D: appends of 1 KiB under sync none, verified reads of\n"+
			"recent records, appends acknowledged after an fdatasync from 1 and 64\n"+
			"writers, and the limits they are compared with (copy + CRC-32C of 1 KiB\n"+
			"into a mapped file, CRC-32C of 1 KiB, a 4 KiB append + fdatasync). Works in\n"+
			"a new directory inside D, removed at the end. Then the append tail: every\n"+
			"append of 256 MiB of 1 KiB records into a fresh log timed (p50 to max,\n"+
			"appends over 1 ms, MB/s), beside one pwrite(2) per record and 1 MiB\n"+
			"pwrites into fresh files. Takes about 15 seconds.\n"+
			"Phases are reported on standard error, the table on standard output.", stderr)
	dir := fs.String("dir", "", "`directory` on the disk to measure (default: the system's temporary directory)")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if *dir == "" {
		*dir = os.TempDir()
	}
	work, err := os.MkdirTemp(*dir, "pagelog-bench-")
	if err != nil {
		return fail(stderr, "bench", err)
	}
	defer os.RemoveAll(work)
	figs, err := benchFigures(work, stderr)
	if err != nil {
		return fail(stderr, "bench", err)
	}
	start := time.Now()
	fmt.Fprint(stderr, "pagelog bench: append tail...")
	tail, err := benchTail(work)
	if err != nil {
		fmt.Fprintln(stderr)
		return fail(stderr, "bench", fmt.Errorf("append tail: %w", err))
	}
	fmt.Fprintf(stderr, " %.1fs\n", time.Since(start).Seconds())
	printBench(stdout, *dir, figs)
	printTail(stdout, tail)
	return 0
}

// benchFig is one measured figure: per-operation latencies and the wall
// time of all operations (writers together).
type benchFig struct {
	name     string
	p50, p99 time.Duration
	perOp    time.Duration // wall time / operations
	ops      int
	vs       string // ratio to a limit, filled in by benchRatios
}

func newBenchFig(name string, lat []time.Duration, wall time.Duration) benchFig {
	s := slices.Clone(lat)
	slices.Sort(s)
	return benchFig{name: name, p50: s[len(s)/2], p99: s[len(s)*99/100],
		perOp: wall / time.Duration(len(s)), ops: len(s)}
}

// benchFigures runs every phase in work and returns the figures in the
// order of the table: pagelog's, then the limits.
func benchFigures(work string, stderr io.Writer) ([]benchFig, error) {
	phases := []struct {
		name string
		run  func(string) ([]benchFig, error)
	}{
		{"append and read", benchAppendRead},
		{"synced appends", benchSynced},
		{"limits", benchLimits},
	}
	var figs []benchFig
	for _, p := range phases {
		start := time.Now()
		fmt.Fprintf(stderr, "pagelog bench: %s...", p.name)
		f, err := p.run(work)
		if err != nil {
			fmt.Fprintln(stderr)
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Fprintf(stderr, " %.1fs\n", time.Since(start).Seconds())
		figs = append(figs, f...)
	}
	benchRatios(figs)
	return figs, nil
}

// benchAppendRead appends 1 KiB records under SyncNone, then reads recent
// ones (among the newest thousand) from the same log.
func benchAppendRead(work string) ([]benchFig, error) {
	const n, reads = 100_000, 200_000
	l, err := engine.Open(filepath.Join(work, "append"), engine.Options{})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	body := make([]byte, 1024)
	lat := make([]time.Duration, n)
	start := time.Now()
	for i := range lat {
		t := stopwatch.Start()
		if _, err := l.Append(body); err != nil {
			return nil, err
		}
		lat[i] = t.Elapsed()
	}
	app := newBenchFig("append 1 KiB, sync none", lat, time.Since(start))

	lat = make([]time.Duration, reads)
	next := l.Next()
	var sink byte
	start = time.Now()
	for i := range lat {
		off := next - 1 - uint64(i*7919%1000)
		t := stopwatch.Start()
		r, err := l.Read(off)
		if err != nil {
			return nil, err
		}
		sink += r.Body[0]
		r.Release()
		lat[i] = t.Elapsed()
	}
	_ = sink
	return []benchFig{app, newBenchFig("read a recent 1 KiB record (verified)", lat, time.Since(start))}, nil
}

// benchSynced appends 1 KiB records acknowledged after an fdatasync, from
// one writer, then from 64 at once (they share syncs).
func benchSynced(work string) ([]benchFig, error) {
	var figs []benchFig
	for _, c := range []struct {
		writers, max int
		budget       time.Duration
	}{{1, 1000, time.Second}, {64, 20_000, 2 * time.Second}} {
		l, err := engine.Open(filepath.Join(work, fmt.Sprintf("sync%d", c.writers)), engine.Options{Sync: engine.SyncAlways})
		if err != nil {
			return nil, err
		}
		body := make([]byte, 1024)
		lat, wall, err := runWriters(c.writers, c.max, c.budget, func() error {
			_, err := l.Append(body)
			return err
		})
		if cerr := l.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		name := "synced append 1 KiB, 1 writer"
		if c.writers > 1 {
			name = fmt.Sprintf("synced append 1 KiB, %d writers", c.writers)
		}
		figs = append(figs, newBenchFig(name, lat, wall))
	}
	return figs, nil
}

// runWriters runs op from writers goroutines until max operations or
// budget (at least 20 operations), timing each.
func runWriters(writers, max int, budget time.Duration, op func() error) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, max)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	start := time.Now()
	deadline := start.Add(budget)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(max) || (i >= 20 && time.Now().After(deadline)) {
					return
				}
				t := stopwatch.Start()
				if err := op(); err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					return
				}
				lat[i] = t.Elapsed()
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if first != nil {
		return nil, 0, first
	}
	n := min(int(next.Load()), max)
	// Operations claimed after the deadline did not run: drop their zeros.
	done := slices.DeleteFunc(slices.Clone(lat[:n]), func(d time.Duration) bool { return d == 0 })
	return done, wall, nil
}

// benchLimits measures the machine's limits: CRC-32C and copy + CRC-32C
// of 1 KiB into a resident page of a mapped file (timed in blocks of 64),
// and a 4 KiB append followed by fdatasync.
func benchLimits(work string) ([]benchFig, error) {
	const area = 4 << 20
	f, err := os.Create(filepath.Join(work, "limit-mapped"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Zeros written, not a hole made by ftruncate: on a full disk the
	// write fails with ENOSPC, where a store into a hole raises SIGBUS.
	if _, err := f.WriteAt(make([]byte, area), 0); err != nil {
		return nil, err
	}
	m, err := mapShared(f, area)
	if err != nil {
		return nil, err
	}
	defer unmap(m)
	for i := 0; i < area; i += os.Getpagesize() {
		m[i] = 1 // fault every page in, writable, before timing
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	body := make([]byte, 1024)
	var sum uint32
	copyCRC := blockFig("copy 1 KiB into a mapped file + CRC-32C", func(i int) {
		at := i * 1024 % area
		copy(m[at:], body)
		sum += crc32.Checksum(m[at:at+1024], table)
	})
	crc := blockFig("CRC-32C of 1 KiB", func(int) { sum += crc32.Checksum(body, table) })
	_ = sum

	g, err := os.Create(filepath.Join(work, "limit-fdatasync"))
	if err != nil {
		return nil, err
	}
	defer g.Close()
	block := make([]byte, 4096)
	var pos int64
	lat, wall, err := runWriters(1, 1000, time.Second, func() error {
		if _, err := g.WriteAt(block, pos); err != nil {
			return err
		}
		pos += int64(len(block))
		return fdatasync(g)
	})
	if err != nil {
		return nil, err
	}
	return []benchFig{copyCRC, crc, newBenchFig("append 4 KiB to a file + fdatasync", lat, wall)}, nil
}

// blockFig times op in blocks of 64 (too short to time alone) and reports
// per-operation figures.
func blockFig(name string, op func(i int)) benchFig {
	const block, blocks = 64, 8192
	lat := make([]time.Duration, blocks)
	start := time.Now()
	for b := range lat {
		t := stopwatch.Start()
		for k := 0; k < block; k++ {
			op(b*block + k)
		}
		lat[b] = t.Elapsed() / block
	}
	return newBenchFig(name, lat, time.Since(start)/block)
}

// benchRatios fills in each pagelog figure's ratio to its limit (p50 over
// p50; for 64 writers, wall time per append over one fdatasync's p50).
func benchRatios(figs []benchFig) {
	if len(figs) < 7 {
		return
	}
	app, read, sync1, sync64 := &figs[0], &figs[1], &figs[2], &figs[3]
	copyCRC, crc, fsync := figs[4], figs[5], figs[6]
	ratio := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
	app.vs = fmt.Sprintf("p50 %.2fx copy+CRC", ratio(app.p50, copyCRC.p50))
	read.vs = fmt.Sprintf("p50 %.2fx CRC-32C", ratio(read.p50, crc.p50))
	sync1.vs = fmt.Sprintf("p50 %.2fx fdatasync", ratio(sync1.p50, fsync.p50))
	sync64.vs = fmt.Sprintf("per op %.3fx fdatasync", ratio(sync64.perOp, fsync.p50))
	figs[4].vs, figs[5].vs, figs[6].vs = "(limit)", "(limit)", "(limit)"
}

func printBench(w io.Writer, dir string, figs []benchFig) {
	fmt.Fprintf(w, "pagelog bench on %s\n\n", dir)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tp50\tp99\tper op\tops/s\tvs limit\t")
	for _, f := range figs {
		rate := float64(time.Second) / float64(max(f.perOp, 1))
		fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%.0f\t%s\t\n", f.name, roundDur(f.p50), roundDur(f.p99), roundDur(f.perOp), rate, f.vs)
	}
	tw.Flush()
	fmt.Fprint(w, "\nper op = wall time / operations (all writers together); p50/p99 include the\n"+
		"timer (tens of ns); the CRC and copy limits are timed in blocks of 64.\n")
}

// roundDur keeps three significant digits.
func roundDur(d time.Duration) time.Duration {
	for r := time.Duration(1); r < time.Hour; r *= 10 {
		if d < 1000*r {
			return d.Round(r)
		}
	}
	return d
}
