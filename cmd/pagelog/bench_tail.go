package main

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/stopwatch"
)

// The append tail: every append of a stream into a fresh log timed, beside
// the kernel's own write paths into a fresh file on the same disk, so that
// the slowest appends can be judged against what the machine gives.

// tailBytes is how much each path of the tail phase writes.
const tailBytes = 256 << 20

// tailFig is one path's latency distribution and sustained rate.
type tailFig struct {
	name                         string
	p50, p99, p999, p9999, worst time.Duration
	over1ms                      int
	mbps                         float64
}

func newTailFig(name string, lat []time.Duration, bytes int64, wall time.Duration) tailFig {
	s := slices.Clone(lat)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	f := tailFig{name: name, p50: at(.5), p99: at(.99), p999: at(.999), p9999: at(.9999), worst: s[len(s)-1],
		mbps: float64(bytes) / wall.Seconds() / 1e6}
	for _, d := range s {
		if d > time.Millisecond {
			f.over1ms++
		}
	}
	return f
}

// benchTail appends tailBytes of 1 KiB records into a fresh log under
// SyncNone, then writes as much into fresh files with one pwrite per record
// and with 1 MiB pwrites.
func benchTail(work string) ([]tailFig, error) {
	const body = 1024
	rec := body + 16
	n := tailBytes / rec
	lat := make([]time.Duration, n)

	l, err := engine.Open(filepath.Join(work, "tail"), engine.Options{})
	if err != nil {
		return nil, err
	}
	b := make([]byte, body)
	start := time.Now()
	for i := range lat {
		t := stopwatch.Start()
		if _, err := l.Append(b); err != nil {
			l.Close()
			return nil, err
		}
		lat[i] = t.Elapsed()
	}
	figs := []tailFig{newTailFig("pagelog append 1 KiB, sync none", lat, int64(n*rec), time.Since(start))}
	if err := l.Close(); err != nil {
		return nil, err
	}
	_ = os.RemoveAll(filepath.Join(work, "tail"))

	table := crc32.MakeTable(crc32.Castagnoli)
	r := make([]byte, rec)
	fig, err := pwriteTail(filepath.Join(work, "tail-pwrite"), "pwrite(2) per 1 KiB record", n, func(f *os.File, i int) error {
		r[8] = byte(i)
		_ = crc32.Checksum(r[8:], table)
		_, err := f.WriteAt(r, int64(i*rec))
		return err
	})
	if err != nil {
		return nil, err
	}
	figs = append(figs, fig)
	chunk := make([]byte, 1<<20)
	fig, err = pwriteTail(filepath.Join(work, "tail-bulk"), "pwrite(2) of 1 MiB (per write)", tailBytes/len(chunk), func(f *os.File, i int) error {
		_, err := f.WriteAt(chunk, int64(i*len(chunk)))
		return err
	})
	if err != nil {
		return nil, err
	}
	return append(figs, fig), nil
}

// pwriteTail times n calls of write into a fresh file at path.
func pwriteTail(path, name string, n int, write func(*os.File, int) error) (tailFig, error) {
	f, err := os.Create(path)
	if err != nil {
		return tailFig{}, err
	}
	defer os.Remove(path)
	defer f.Close()
	lat := make([]time.Duration, n)
	start := time.Now()
	for i := range lat {
		t := stopwatch.Start()
		if err := write(f, i); err != nil {
			return tailFig{}, err
		}
		lat[i] = t.Elapsed()
	}
	return newTailFig(name, lat, tailBytes, time.Since(start)), nil
}

func printTail(w io.Writer, figs []tailFig) {
	fmt.Fprintf(w, "\nappend tail: %d MiB into a fresh log, and into fresh files with write(2)\n\n", tailBytes>>20)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "path\tp50\tp99\tp99.9\tp99.99\tmax\tover 1 ms\tMB/s\t")
	for _, f := range figs {
		fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%v\t%v\t%d\t%.0f\t\n", f.name, roundDur(f.p50), roundDur(f.p99),
			roundDur(f.p999), roundDur(f.p9999), roundDur(f.worst), f.over1ms, f.mbps)
	}
	tw.Flush()
}
