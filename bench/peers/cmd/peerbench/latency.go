package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pagelog/pagelog/bench/peers/internal/hist"
)

// Every timed append of a run, per system and workload, is also written as
// a latency histogram (internal/hist) to <out>/latency/peers-<workload>-
// <system>.hist, for the latency chart of `make bench` (cmd/latchart).

type keptLatencies struct {
	name string // file stem
	desc string
	h    hist.Hist
}

var kept []*keptLatencies

// keepLatencies keeps a's timed operations when w is an append workload.
func keepLatencies(cfg config, w workload, s system, a *accum) {
	if a == nil || w.Kind != kindAppend || len(a.lat) == 0 {
		return
	}
	k := &keptLatencies{
		name: "peers-" + w.ID + "-" + s.name2(),
		desc: fmt.Sprintf("peerbench: %s, %s, every timed operation of %d rounds", s.name, w.Title, cfg.rounds),
	}
	for _, d := range a.lat {
		k.h.Add(d)
	}
	kept = append(kept, k)
}

// writeLatencies writes the kept histograms under out/latency.
func writeLatencies(out string) error {
	dir := filepath.Join(out, "latency")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, k := range kept {
		if err := k.h.WriteFile(filepath.Join(dir, k.name+".hist"), k.desc); err != nil {
			return err
		}
	}
	return nil
}
