package main

import (
	"fmt"
	"os"
	"time"
)

// allSystems is every system, pagelog first.
func allSystems() []system {
	return []system{
		pagelogSystem(),
		tidwallSystem(),
		tidwallNoCopySystem(),
		raftwalSystem(),
		bboltSystem(),
		jetstreamSystem(),
		diskqueueSystem(),
	}
}

// progress is the line on standard error that says what runs now: redrawn in
// place on a terminal, one line per step elsewhere.
type progress struct {
	f     *os.File
	tty   bool
	total int
	n     int
	start time.Time
}

func newProgress(f *os.File, total int) *progress {
	fi, err := f.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	return &progress{f: f, tty: tty, total: total, start: time.Now()}
}

func (p *progress) step(what, system string, round int) {
	p.n++
	line := fmt.Sprintf("peerbench [%d/%d] %5.0fs  %s", p.n, p.total, time.Since(p.start).Seconds(), what)
	if system != "" {
		line += fmt.Sprintf("  %s  round %d", system, round+1)
	}
	if p.tty {
		fmt.Fprint(p.f, "\r"+line+"\x1b[K")
	} else {
		fmt.Fprintln(p.f, line)
	}
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprint(p.f, "\r\x1b[K")
	}
	fmt.Fprintf(p.f, "peerbench: done in %.0f s\n", time.Since(p.start).Seconds())
}
