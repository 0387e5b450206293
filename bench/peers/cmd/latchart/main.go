// Command latchart draws the latency chart of `make bench`: every timed
// operation of the append tail benchmarks (pagelog's Append, one pwrite(2)
// per record, 1 MiB pwrites, copy + CRC-32C) and of the peer harness's
// append workloads, as latency by percentile on a log axis of 1/(1-p)
// (HdrHistogram's percentile distribution), with a text table of the same
// percentiles.
//
//	latchart [--dir bench/results/latency] [--out bench/results]
//
// It reads the histogram files (*.hist, see internal/hist) that
// `go test -bench AppendTail ./bench/` writes when PAGELOG_BENCH_LATENCY_DIR
// names a directory, and that peerbench writes to <out>/latency, and
// writes latency.svg and latency.txt to --out.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pagelog/pagelog/bench/peers/internal/hist"
)

func main() {
	dir := flag.String("dir", filepath.Join("bench", "results", "latency"), "`directory` of the histogram files")
	out := flag.String("out", filepath.Join("bench", "results"), "`directory` for latency.svg and latency.txt")
	flag.Parse()
	panels, err := load(*dir)
	if err == nil {
		err = write(*out, panels)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "latchart:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "latchart: wrote %s and %s\n", filepath.Join(*out, "latency.svg"), filepath.Join(*out, "latency.txt"))
}

// series is one curve: a histogram file.
type series struct {
	label    string
	baseline bool // the kernel's or the machine's path, not a log
	h        *hist.Hist
}

// panel is one chart: the series of one kind of operation.
type panel struct {
	title  string
	prefix []string // the file stems it draws, by prefix
	series []series
}

func panels() []*panel {
	return []*panel{
		{title: "Append 1 KiB, page-cache durability (no fsync before OK), one writer",
			prefix: []string{"AppendTail-path-", "peers-append-1KiB-"}},
		{title: "Append 1 KiB, fsync before OK, one writer",
			prefix: []string{"peers-append-sync-1w-"}},
		{title: "Append 64 B, page-cache durability, one writer",
			prefix: []string{"peers-append-64B-"}},
		{title: "Append 1 KiB, fsync before OK, 64 writers (each append)",
			prefix: []string{"peers-append-sync-64w-"}},
		// Any other histogram (another benchmark that reports through the
		// tail benchmarks' helpers), under its file name.
		{title: "Other timed operations", prefix: []string{""}},
	}
}

// tailLabels names the append tail benchmark's paths.
var tailLabels = map[string]string{
	"pagelog":       "pagelog Append, 1 GiB, fresh log (AppendTail)",
	"pwrite-record": "one pwrite per record, fresh file (AppendTail)",
	"pwrite-1MiB":   "1 MiB pwrites, fresh file, per 1 MiB (AppendTail)",
	"copy-crc":      "copy + CRC-32C: the noise floor (AppendTail)",
}

// describe returns the label of the file stem name under prefix p.
func describe(p, name string) (label string, baseline bool) {
	rest := strings.TrimPrefix(name, p)
	switch p {
	case "":
		return name, false
	case "AppendTail-path-":
		if l, ok := tailLabels[rest]; ok {
			return l, rest != "pagelog"
		}
		return "AppendTail " + rest, true
	}
	// peerbench's file-safe system names: "tidwall/wal" is tidwall_wal.
	return strings.ReplaceAll(rest, "_", "/") + " (peerbench)", false
}

// load reads the histogram files of dir into the panels they belong to.
func load(dir string) ([]*panel, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.hist"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no histogram files (*.hist) in %s", dir)
	}
	ps := panels()
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".hist")
		var into *panel
		var pre string
		for _, p := range ps {
			for _, x := range p.prefix {
				if into == nil && strings.HasPrefix(name, x) {
					into, pre = p, x
				}
			}
		}
		h, err := hist.ReadFile(f)
		if err != nil {
			return nil, err
		}
		label, base := describe(pre, name)
		into.series = append(into.series, series{label: label, baseline: base, h: h})
	}
	var out []*panel
	for _, p := range ps {
		if len(p.series) == 0 {
			continue
		}
		// pagelog first, then the peers, then the baselines.
		slices.SortStableFunc(p.series, func(a, b series) int {
			return rank(a) - rank(b)
		})
		out = append(out, p)
	}
	return out, nil
}

func rank(s series) int {
	switch {
	case strings.HasPrefix(s.label, "pagelog"):
		return 0
	case s.baseline:
		return 2
	}
	return 1
}

// quantiles are the table's columns (1 is the maximum).
var quantiles = []struct {
	q    float64
	name string
}{
	{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}, {0.999, "p99.9"}, {0.9999, "p99.99"}, {0.99999, "p99.999"}, {1, "max"},
}

func write(out string, ps []*panel) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "latency.txt"), []byte(table(ps)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "latency.svg"), []byte(svg(ps)), 0o644)
}

// table is the text form: per panel, each series' operations and
// percentiles. A percentile finer than the operations resolve (fewer than
// 10 operations beyond it) is shown in brackets.
func table(ps []*panel) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Latency by percentile: every timed operation, from the histogram files (*.hist) of latchart --dir; drawn in latency.svg.\n")
	fmt.Fprintf(&sb, "[x]: fewer than 10 operations lie beyond this percentile, so it is close to the maximum.\n")
	for _, p := range ps {
		w := 0
		for _, s := range p.series {
			w = max(w, len(s.label))
		}
		fmt.Fprintf(&sb, "\n%s\n\n%-*s %10s", p.title, w, "", "operations")
		for _, q := range quantiles {
			fmt.Fprintf(&sb, " %9s", q.name)
		}
		sb.WriteString("\n")
		for _, s := range p.series {
			fmt.Fprintf(&sb, "%-*s %10d", w, s.label, s.h.N())
			for _, q := range quantiles {
				v := duration(s.h.Quantile(q.q))
				if q.q < 1 && float64(s.h.N())*(1-q.q) < 10 {
					v = "[" + v + "]"
				}
				fmt.Fprintf(&sb, " %9s", v)
			}
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

// duration prints d with three significant digits.
func duration(d time.Duration) string {
	ns := float64(d.Nanoseconds())
	unit, div := "ns", 1.0
	switch {
	case ns >= 1e9:
		unit, div = "s", 1e9
	case ns >= 1e6:
		unit, div = "ms", 1e6
	case ns >= 1e3:
		unit, div = "µs", 1e3
	}
	v := ns / div
	switch {
	case v >= 100 || div == 1:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}
