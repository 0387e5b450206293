package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// text renders the report as peers.txt: the run, the limits, one table per
// workload, the ratios to the limits, the targets, and how each system is
// driven.
func (rep *report) text() string {
	var b strings.Builder
	mode := "full run"
	if rep.Quick {
		mode = "QUICK run (--quick): indicative only"
	}
	fmt.Fprintf(&b, "pagelog peer comparison, %s\n", rep.Date)
	fmt.Fprintf(&b, "CPU %s (%d cores), %s, Linux %s, %s\n", rep.CPU, rep.Cores, rep.Go, rep.Kernel, rep.OSArch)
	fmt.Fprintf(&b, "Disk: %s (%s). %s: %d rounds per workload in rotated system order, %.2g s per phase, %.0f s in all.\n",
		rep.Dir, rep.Filesystem, mode, rep.Rounds, rep.PhaseSeconds, rep.Seconds)
	fmt.Fprintf(&b, "p50/p99 time each operation (timer overhead %.0f ns included); ops/s and allocations come from an\n"+
		"untimed phase where one is run; allocations are counted process-wide (an embedded server's included).\n"+
		"\"per op\" = wall time / operations (all writers together) = 1 / ops/s. \"pagelog x\" = pagelog's ops/s / the\n"+
		"row's ops/s (above 1: pagelog is faster). A limit is taken at its p50 in the ratios.\n\n", rep.TimerOverheadNs)

	b.WriteString("Machine limits\n")
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  limit\tp50\tp99\tper op\tops/s\tnote\t")
	for _, l := range rep.Limits {
		if l.MBps > 0 {
			fmt.Fprintf(tw, "  %s\t\t\t\t%.0f MB/s\t%s\t\n", l.Title, l.MBps, l.Note)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", l.Title, fmtNs(l.P50ns), fmtNs(l.P99ns), fmtNs(l.NsPerOp), fmtRate(l.OpsPerSec), l.Note)
	}
	tw.Flush()

	for _, w := range rep.works {
		fmt.Fprintf(&b, "\n%s: %s\n", w.ID, w.Title)
		tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  system\tp50\tp99\tp99.9\tops/s\tper op\tallocs/op\tB/op\tpagelog x\t")
		p, havePagelog := rep.find("pagelog", w.ID)
		for _, r := range rep.Results {
			if r.Workload != w.ID {
				continue
			}
			if !r.ok() {
				fmt.Fprintf(tw, "  %s\tFAILED: %s\t\t\t\t\t\t\t\t\n", r.System, r.Error)
				continue
			}
			x := "-"
			if havePagelog && r.System != "pagelog" {
				x = fmtX(p.OpsPerSec / r.OpsPerSec)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%.3g\t%.0f\t%s\t\n", r.System, fmtNs(r.P50ns), fmtNs(r.P99ns),
				fmtNs(r.P999ns), fmtRate(r.OpsPerSec), fmtNs(r.NsPerOp), r.AllocsPerOp, r.BytesPerOp, x)
		}
		tw.Flush()
		for _, r := range rep.Results {
			if r.Workload == w.ID && r.Note != "" {
				fmt.Fprintf(&b, "  note %s: %s\n", r.System, r.Note)
			}
		}
		for _, u := range rep.Unsupported {
			if u.Workload == w.ID {
				fmt.Fprintf(&b, "  n/a  %s: %s\n", u.System, u.Why)
			}
		}
	}

	b.WriteString("\npagelog vs the machine's limits\n")
	for _, r := range rep.Ratios {
		if strings.HasPrefix(r.Name, "pagelog ") {
			fmt.Fprintf(&b, "  %-8s %s\n", fmtX(r.Value), r.Of)
		}
	}

	b.WriteString("\nTargets (issue 5)\n")
	for _, t := range rep.Targets {
		fmt.Fprintf(&b, "  %s\n", t.Text)
	}
	fmt.Fprintf(&b, "  missed: %s\n", joinOr(rep.missed(), "none"))

	b.WriteString("\nHow each system is driven\n")
	for _, s := range rep.Systems {
		b.WriteString(wrap(s.Name+": "+s.Setup, 100, "      "))
	}
	return b.String()
}

// wrap breaks text into lines of at most width bytes, the lines after the
// first indented.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(text) {
		if i > 0 && line+1+len(word) > width {
			b.WriteString("\n" + indent)
			line = len(indent)
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		} else {
			b.WriteString("  ")
			line = 2
		}
		b.WriteString(word)
		line += len(word)
	}
	b.WriteByte('\n')
	return b.String()
}
