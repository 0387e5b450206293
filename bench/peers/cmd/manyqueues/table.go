package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// table renders the rows as Markdown: the machine, the figures, the notes
// that say where a system stopped, and how each system is driven.
func table(rows []row, spread time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Many queues: %s, %d CPUs, Linux %s, %s.\n", cpuModel(), runtime.NumCPU(),
		strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")), runtime.Version())
	if base, ok := baseline(rows); ok {
		fmt.Fprintf(&b, "Each system in child processes of its own; a child before it opens anything: RSS %s, %d descriptors, %d mappings, %d goroutines. ",
			mib(base.Base.RSSBytes), base.Base.FDs, base.Base.Maps, base.Base.Goroutines)
		fmt.Fprintf(&b, "Descriptor limit (soft raised to hard) %d, vm.max_map_count %d.\n", base.NoFileSoft, base.MaxMapCount)
	}
	fmt.Fprintf(&b, "Spread send: 1 KiB round-robin over all the queues for %v; spread receive+delete: round-robin for %v (or until empty).\n\n", spread, spread)
	b.WriteString("| system | queues | create/queue | RSS | fds | maps | goroutines | disk | send msg/s | recv+del msg/s | Close | reopen | RSS reopened |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var notes []string
	for _, r := range rows {
		queues := fmt.Sprint(r.Queues)
		if r.Err != "" {
			notes = append(notes, fmt.Sprintf("%s, %d queues: %s", r.System, r.Queues, r.Err))
			queues = fmt.Sprintf("%d: stopped (%d)", r.Queues, len(notes))
			if c := r.Create; c != nil && c.Reached < r.Queues {
				queues = fmt.Sprintf("%d: stopped at %d (%d)", r.Queues, c.Reached, len(notes))
			}
		}
		cells := []string{r.System, queues, "–", "–", "–", "–", "–", "–", "–", "–", "–", "–", "–"}
		if c := r.Create; c != nil {
			u := c.Created
			cells[3], cells[4], cells[5], cells[6] = mib(u.RSSBytes), fmt.Sprint(u.FDs), fmt.Sprint(u.Maps), fmt.Sprint(u.Goroutines)
			if c.Reached > 0 {
				cells[2] = dur(time.Duration(c.CreateNs / int64(c.Reached)))
			}
			cells[7] = mib(c.DiskBytes)
			cells[8] = rate(c.SendOps, c.SendNs)
			cells[9] = rate(c.RecvOps, c.RecvNs)
			cells[10] = dur(time.Duration(c.CloseNs))
		}
		if o := r.Reopen; o != nil && o.ReopenNs > 0 {
			cells[11] = dur(time.Duration(o.ReopenNs))
			cells[12] = mib(o.Reopened.RSSBytes)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	b.WriteString("\nRSS, fds, maps and goroutines: once every queue holds its first message (or where the system stopped). " +
		"create/queue: making a queue and sending its first 100-byte message, the system's own start left out (over the queues made, where it stopped). " +
		"Close: closing the system with every queue (where it stopped too). " +
		"disk: du of the data directory after Close. reopen: a new process starts the system and touches every queue. " +
		"RSS reopened: then.\n")
	for i, n := range notes {
		fmt.Fprintf(&b, "\n(%d) %s\n", i+1, n)
	}
	b.WriteString("\nHow each system is driven:\n\n")
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.System] {
			continue
		}
		seen[r.System] = true
		for _, s := range systems {
			if s != nil && s.name == r.System {
				fmt.Fprintf(&b, "- %s: %s\n", s.name, s.setup)
			}
		}
	}
	return b.String()
}

// baseline is the create result whose child started smallest.
func baseline(rows []row) (*result, bool) {
	var best *result
	for _, r := range rows {
		if c := r.Create; c != nil && c.Base.RSSBytes > 0 && (best == nil || c.Base.RSSBytes < best.Base.RSSBytes) {
			best = c
		}
	}
	return best, best != nil
}

func mib(b int64) string {
	if b < 0 {
		return "n/a"
	}
	v := float64(b) / (1 << 20)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f MiB", v)
	case v >= 10:
		return fmt.Sprintf("%.1f MiB", v)
	}
	return fmt.Sprintf("%.2f MiB", v)
}

func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func rate(ops int, ns int64) string {
	if ns <= 0 {
		return "–"
	}
	v := float64(ops) / (float64(ns) / 1e9)
	if v >= 10000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "?"
	}
	return string(b)
}

func cpuModel() string {
	for _, l := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
