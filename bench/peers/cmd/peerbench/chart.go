package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// limitOf names the limit drawn beside each workload's group in the chart.
var limitOf = map[string]string{
	"append-1KiB":     limCopyCRC,
	"append-64B":      limCopyCRC6,
	"read-recent":     limCRC,
	"append-sync-1w":  limSync,
	"append-sync-64w": limSync,
}

// chart draws p50 (filled) and p99 (open) per system and workload, joined
// by a line, on a log scale, with the machine's limit of each workload as a
// dashed grey line across its group.
func (rep *report) chart(name string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("pagelog and peers: latency per operation, p50 (filled) to p99 (open)\n%s · %s · %s · %s",
		rep.Date[:10], rep.CPU, rep.Go, rep.Filesystem)
	p.Y.Label.Text = "time per operation (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = nsTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.ThumbnailWidth = vg.Points(12)

	names := make([]string, len(rep.works))
	for i, w := range rep.works {
		names[i] = w.ID
	}
	p.NominalX(names...)

	// Each group holds the systems measured on that workload, centred.
	slot := make(map[[2]string]float64)
	for i, w := range rep.works {
		var here []string
		for _, s := range rep.Systems {
			if _, ok := rep.find(s.Name, w.ID); ok {
				here = append(here, s.Name)
			}
		}
		width := 0.8 / float64(max(len(here), 1))
		for k, name := range here {
			slot[[2]string{name, w.ID}] = float64(i) + (float64(k)-float64(len(here)-1)/2)*width
		}
	}
	lo, hi := math.Inf(1), 0.0
	for k, s := range rep.Systems {
		col := systemColor(s.Name)
		var p50s plotter.XYs
		for _, w := range rep.works {
			r, ok := rep.find(s.Name, w.ID)
			if !ok {
				continue
			}
			x := slot[[2]string{s.Name, w.ID}]
			lo, hi = math.Min(lo, r.P50ns), math.Max(hi, r.P99ns)
			ln, err := plotter.NewLine(plotter.XYs{{X: x, Y: r.P50ns}, {X: x, Y: r.P99ns}})
			if err != nil {
				return err
			}
			ln.Color, ln.Width = col, vg.Points(1.5)
			open, err := plotter.NewScatter(plotter.XYs{{X: x, Y: r.P99ns}})
			if err != nil {
				return err
			}
			open.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(3.5), Shape: draw.RingGlyph{}}
			p.Add(ln, open)
			p50s = append(p50s, plotter.XY{X: x, Y: r.P50ns})
		}
		if len(p50s) == 0 {
			continue
		}
		filled, err := plotter.NewScatter(p50s)
		if err != nil {
			return err
		}
		filled.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(4), Shape: filledShapes[k%len(filledShapes)]}
		p.Add(filled)
		p.Legend.Add(s.Name, filled)
	}

	var limitLine *plotter.Line
	for i, w := range rep.works {
		l, ok := rep.limit(limitOf[w.ID])
		if !ok || l.P50ns <= 0 {
			continue
		}
		lo = math.Min(lo, l.P50ns)
		ln, err := plotter.NewLine(plotter.XYs{{X: float64(i) - 0.45, Y: l.P50ns}, {X: float64(i) + 0.45, Y: l.P50ns}})
		if err != nil {
			return err
		}
		ln.Color = color.Gray{Y: 120}
		ln.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(ln)
		limitLine = ln
	}
	if limitLine != nil {
		p.Legend.Add("machine limit (p50)", limitLine)
	}
	if hi > 0 {
		p.Y.Min = lo / 2
		p.Y.Max = hi * 40 // room for the legend above the points
	}
	p.Add(plotter.NewGrid())
	return p.Save(13*vg.Inch, 7*vg.Inch, name)
}

var filledShapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}

// palette: one distinct colour per system (pagelog black).
var palette = map[string]color.RGBA{
	"pagelog":            {0, 0, 0, 255},
	"tidwall/wal":        {44, 160, 44, 255},
	"tidwall/wal NoCopy": {152, 223, 138, 255},
	"raft-wal":           {255, 127, 14, 255},
	"bbolt":              {148, 103, 189, 255},
	"JetStream":          {31, 119, 180, 255},
	"go-diskqueue":       {214, 39, 40, 255},
}

func systemColor(name string) color.Color {
	if c, ok := palette[name]; ok {
		return c
	}
	return color.Gray{Y: 100}
}

// nsTicks puts ticks at powers of ten of nanoseconds, labelled in units.
type nsTicks struct{}

func (nsTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for v := math.Pow(10, math.Floor(math.Log10(min))); v <= max; v *= 10 {
		if v >= min {
			ticks = append(ticks, plot.Tick{Value: v, Label: fmtNs(v)})
		}
		for m := 2.0; m < 10; m++ {
			if v*m >= min && v*m <= max {
				ticks = append(ticks, plot.Tick{Value: v * m})
			}
		}
	}
	return ticks
}
