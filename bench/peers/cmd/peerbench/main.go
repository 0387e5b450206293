// Command peerbench measures pagelog beside the storage engines a Go user
// would pick instead, and beside the machine's limits, in one process run.
//
// Every workload runs on every system that supports it, for several rounds;
// each round starts with a different system (the order rotates), so that
// drift in the machine (page cache, disk, CPU frequency) is spread over all
// of them. Each measurement uses a fresh directory under --dir, removed at the
// end. Results go to --out: peers.json (machine-readable), peers.txt (the
// table, the ratios and the targets) and peers.png (p50/p99, log scale).
//
//	peerbench [--dir D] [--out bench/results] [--quick] [--rounds N] [--workloads a,b] [--systems a,b]
//
// A progress line is written to standard error while it runs.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	os.Exit(run())
}

func run() int {
	dir := flag.String("dir", os.TempDir(), "scratch `directory` on the disk to measure (a subdirectory is made and removed)")
	out := flag.String("out", filepath.Join("bench", "results"), "`directory` for peers.json, peers.txt and peers.png")
	quick := flag.Bool("quick", false, "a short run (~30 s): fewer rounds and operations")
	rounds := flag.Int("rounds", 0, "rounds per workload, each in a rotated system order (default 3, --quick 2)")
	onlyW := flag.String("workloads", "", "comma-separated workload ids to run (default all)")
	onlyS := flag.String("systems", "", "comma-separated system names to run (default all)")
	flag.Parse()

	cfg := config{quick: *quick, rounds: 3, phase: time.Second, scale: 1}
	if *quick {
		cfg.rounds, cfg.phase, cfg.scale = 2, 200*time.Millisecond, 4
	}
	if *rounds > 0 {
		cfg.rounds = *rounds
	}
	works := filterWorkloads(workloads(cfg), *onlyW)
	systems := filterSystems(allSystems(), *onlyS)
	if len(works) == 0 || len(systems) == 0 {
		fmt.Fprintln(os.Stderr, "peerbench: no workload or no system selected")
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		return 1
	}
	scratch, err := os.MkdirTemp(*dir, "peerbench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		return 1
	}
	defer os.RemoveAll(scratch)

	rep, err := bench(cfg, works, systems, scratch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		return 1
	}
	if err := rep.write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		return 1
	}
	if err := writeLatencies(*out); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		return 1
	}
	fmt.Print(rep.text())
	fmt.Fprintf(os.Stderr, "peerbench: wrote %s, %s and %s\n",
		filepath.Join(*out, "peers.json"), filepath.Join(*out, "peers.txt"), filepath.Join(*out, "peers.png"))
	return 0
}

// config sizes a run.
type config struct {
	quick  bool
	rounds int
	phase  time.Duration // time budget of one phase of one measurement
	scale  int           // operation caps are divided by this
}

// bench runs the limits, then every workload on every system.
func bench(cfg config, works []workload, systems []system, scratch string) (*report, error) {
	start := time.Now()
	rep := newReport(cfg, scratch)
	rep.describe(works, systems)
	total := 2
	for _, w := range works {
		total += cfg.rounds * len(supporting(systems, w))
	}
	prog := newProgress(os.Stderr, total)

	// The limits are measured at the start and at the end, and pooled.
	seq := int64(256<<20) / int64(cfg.scale)
	prog.step("machine limits (first pass)", "", 0)
	first, err := measureLimits(cfg, scratch, seq)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}

	for _, w := range works {
		syss := supporting(systems, w)
		acc := make(map[string]*accum)
		for r := 0; r < cfg.rounds; r++ {
			for k := range syss {
				s := syss[(k+r)%len(syss)] // rotate the order each round
				prog.step(w.ID, s.name, r)
				a := acc[s.name]
				if a == nil {
					a = &accum{}
					acc[s.name] = a
				}
				if a.err != nil {
					continue // failed in an earlier round; keep the first error
				}
				if err := measure(cfg, w, s, scratch, a); err != nil {
					a.err = err
				}
			}
		}
		for _, s := range systems {
			if why := s.unsupported(w); why != "" {
				rep.Unsupported = append(rep.Unsupported, unsupported{System: s.name, Workload: w.ID, Why: why})
				continue
			}
			rep.Results = append(rep.Results, acc[s.name].result(s, w))
			keepLatencies(cfg, w, s, acc[s.name])
		}
	}
	prog.step("machine limits (second pass)", "", 0)
	second, err := measureLimits(cfg, scratch, seq)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	rep.Limits = poolLimits(first, second)
	prog.done()
	rep.Seconds = time.Since(start).Seconds()
	rep.finish()
	return rep, nil
}

func filterWorkloads(all []workload, only string) []workload {
	if only == "" {
		return all
	}
	var out []workload
	for _, w := range all {
		if contains(only, w.ID) {
			out = append(out, w)
		}
	}
	return out
}

func filterSystems(all []system, only string) []system {
	if only == "" {
		return all
	}
	var out []system
	for _, s := range all {
		if contains(only, s.name) {
			out = append(out, s)
		}
	}
	return out
}

func contains(list, name string) bool {
	for _, x := range strings.Split(list, ",") {
		if strings.TrimSpace(x) == name {
			return true
		}
	}
	return false
}

// supporting returns the systems that run workload w.
func supporting(systems []system, w workload) []system {
	var out []system
	for _, s := range systems {
		if s.unsupported(w) == "" {
			out = append(out, s)
		}
	}
	return out
}
