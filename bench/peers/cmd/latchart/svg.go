package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The chart, written as SVG by hand: one panel per kind of operation, the
// x axis percentiles on a log scale of 1/(1-p) (0%, 90%, 99%, ... and the
// maximum at the right end of each curve), the y axis latency on a log
// scale.

const (
	width     = 1120
	panelH    = 460
	left      = 70  // room for the y labels
	right     = 420 // room for the legend
	top       = 50
	bottom    = 55
	plotW     = width - left - right
	plotH     = panelH - top - bottom
	legendRow = 18
)

var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

func svg(ps []*panel) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, panelH*len(ps), width, panelH*len(ps))
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, p := range ps {
		fmt.Fprintf(&sb, `<g transform="translate(0,%d)">`+"\n", i*panelH)
		drawPanel(&sb, p)
		sb.WriteString("</g>\n")
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

func drawPanel(sb *strings.Builder, p *panel) {
	// The axes' ranges: x to the decade past the largest 1/(1-p) any curve
	// reaches (its number of operations), y over whole decades.
	var maxN int64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range p.series {
		maxN = max(maxN, s.h.N())
		b := s.h.Buckets()
		lo = min(lo, float64(max(b[0].Ns, 1)))
		hi = max(hi, float64(s.h.Max().Nanoseconds()))
	}
	xDecades := max(1, math.Ceil(math.Log10(float64(maxN))))
	yLo, yHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if yHi <= yLo {
		yHi = yLo + 1
	}
	px := func(inv float64) float64 { return left + math.Log10(inv)/xDecades*plotW }
	py := func(ns float64) float64 {
		return top + plotH - (math.Log10(max(ns, 1))-yLo)/(yHi-yLo)*plotH
	}

	fmt.Fprintf(sb, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(p.title))
	fmt.Fprintf(sb, `<text x="%d" y="38" fill="#555">latency by percentile, every operation timed; log scales (x: 1/(1-p), HdrHistogram style)</text>`+"\n", left)
	// Grid and labels.
	for d := 0.0; d <= xDecades; d++ {
		x := px(math.Pow(10, d))
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, top, x, top+plotH)
		fmt.Fprintf(sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, top+plotH+18, percentLabel(int(d)))
	}
	fmt.Fprintf(sb, `<text x="%d" y="%d" text-anchor="middle" fill="#555">percentile</text>`+"\n", left+plotW/2, top+plotH+40)
	for d := yLo; d <= yHi; d++ {
		y := py(math.Pow(10, d))
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ccc"/>`+"\n", left, y, left+plotW, y)
		fmt.Fprintf(sb, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, decadeLabel(int(d)))
		for m := 2.0; m < 10 && d < yHi; m++ {
			y := py(m * math.Pow(10, d))
			fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#f0f0f0"/>`+"\n", left, y, left+plotW, y)
		}
	}
	fmt.Fprintf(sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", left, top, plotW, plotH)

	for i, s := range p.series {
		color := palette[i%len(palette)]
		style := `stroke-width="2"`
		if s.baseline {
			style = `stroke-width="1.5" stroke-dasharray="6,3"`
		}
		if rank(s) == 0 {
			style = `stroke-width="2.5"`
		}
		fmt.Fprintf(sb, `<polyline fill="none" stroke="%s" %s points="%s"/>`+"\n", color, style, curve(s, px, py))
		ly := top + 10 + i*legendRow*2
		lx := left + plotW + 15
		fmt.Fprintf(sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" %s/>`+"\n", lx, ly, lx+25, ly, color, style)
		fmt.Fprintf(sb, `<text x="%d" y="%d">%s</text>`+"\n", lx+32, ly+4, html.EscapeString(s.label))
		fmt.Fprintf(sb, `<text x="%d" y="%d" fill="#555" font-size="11">%d ops, p50 %s, p99.99 %s, max %s</text>`+"\n",
			lx+32, ly+4+legendRow-3, s.h.N(), duration(s.h.Quantile(0.5)), duration(s.h.Quantile(0.9999)), duration(s.h.Max()))
	}
}

// curve returns the polyline of a series: for each latency, a step across
// the quantiles (before, after] its operations cover, the last one (the
// maximum, exact) ending at 1/(1-p) = n. Points closer than half a pixel
// to the one kept before are left out.
func curve(s series, px, py func(float64) float64) string {
	n := float64(s.h.N())
	b := s.h.Buckets()
	b[len(b)-1].Ns = s.h.Max().Nanoseconds()
	var pts strings.Builder
	lastX, lastY := math.Inf(-1), math.Inf(-1)
	var cum float64
	put := func(x, y float64, force bool) {
		if !force && math.Abs(x-lastX) < 0.5 && math.Abs(y-lastY) < 0.5 {
			return
		}
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
		lastX, lastY = x, y
	}
	for i, k := range b {
		y := py(float64(k.Ns))
		put(px(1/(1-cum/n)), y, i == 0)
		cum += float64(k.Count)
		end := min(cum, n-1) / n
		put(px(1/(1-end)), y, i == len(b)-1)
	}
	return strings.TrimSpace(pts.String())
}

// percentLabel names the x axis' decade d: 1/(1-p) = 10^d.
func percentLabel(d int) string {
	switch d {
	case 0:
		return "0%"
	case 1:
		return "90%"
	case 2:
		return "99%"
	}
	return "99." + strings.Repeat("9", d-2) + "%"
}

// decadeLabel names 10^d nanoseconds.
func decadeLabel(d int) string {
	units := []string{"ns", "µs", "ms", "s"}
	u := min(d/3, len(units)-1)
	v := math.Pow(10, float64(d-3*u))
	return fmt.Sprintf("%g %s", v, units[u])
}
