package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// isTerminal reports whether w is a terminal (so that a progress bar made
// of carriage returns reads well there and does not clutter a file).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return isTerminalFile(f)
}

// progress draws a one-line bar, redrawn in place at most every tick.
// The zero value and a nil *progress draw nothing.
type progress struct {
	w     io.Writer
	label string
	total int64
	unit  func(int64) string // formats done and total
	tick  time.Duration
	start time.Time
	last  time.Time
	drawn bool
}

const barWidth = 30

// newProgress returns a bar on w, or nil when w is not a terminal: callers
// use the result without checking.
func newProgress(w io.Writer, label string, total int64, unit func(int64) string) *progress {
	if !isTerminal(w) {
		return nil
	}
	if unit == nil {
		unit = func(n int64) string { return fmt.Sprint(n) }
	}
	now := time.Now()
	return &progress{w: w, label: label, total: total, unit: unit, tick: 100 * time.Millisecond, start: now}
}

// update redraws the bar when a tick has passed since the last drawing.
func (p *progress) update(done int64) {
	if p == nil {
		return
	}
	now := time.Now()
	if p.drawn && now.Sub(p.last) < p.tick && done < p.total {
		return
	}
	p.last = now
	p.drawn = true
	fmt.Fprint(p.w, "\r"+p.line(done, now)+"\x1b[K")
}

// line renders "label [=====>     ]  45% 512/1024 3.2s".
func (p *progress) line(done int64, now time.Time) string {
	frac := 1.0
	if p.total > 0 {
		frac = min(float64(done)/float64(p.total), 1)
	}
	fill := int(frac * barWidth)
	bar := strings.Repeat("=", fill)
	if fill < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-fill-1)
	}
	return fmt.Sprintf("%s [%s] %3.0f%% %s/%s %.1fs", p.label, bar, frac*100,
		p.unit(done), p.unit(p.total), now.Sub(p.start).Seconds())
}

// finish erases the bar so that the next line starts clean.
func (p *progress) finish() {
	if p == nil || !p.drawn {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K")
}

// formatBytes renders n in decimal units: 512 B, 1.5 kB, 1.07 GB.
func formatBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
