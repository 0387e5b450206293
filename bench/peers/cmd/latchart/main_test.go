package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/bench/peers/internal/hist"
)

// TestChart: histogram files of each kind land in their panel, the table
// shows their percentiles, and the SVG is well-formed XML with one curve
// per series.
func TestChart(t *testing.T) {
	dir := t.TempDir()
	files := map[string]time.Duration{
		"AppendTail-path-pagelog":       100,
		"AppendTail-path-pwrite-1MiB":   100 * time.Microsecond,
		"peers-append-1KiB-tidwall_wal": 2 * time.Microsecond,
		"peers-append-sync-1w-raft-wal": 500 * time.Microsecond,
		"peers-append-64B-bbolt":        20 * time.Microsecond,
		"QueueSteady-send":              300,
	}
	for name, base := range files {
		var h hist.Hist
		for i := range 100000 {
			h.Add(base + time.Duration(i%1000))
		}
		h.Add(base * 1000)
		if err := h.WriteFile(filepath.Join(dir, name+".hist"), name); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 4 || len(ps[0].series) != 3 || len(ps[1].series) != 1 || len(ps[2].series) != 1 || len(ps[3].series) != 1 {
		t.Fatalf("panels: %d, want 4 of 3, 1, 1 and 1 series", len(ps))
	}
	if ps[2].title != "Append 64 B, page-cache durability, one writer" || ps[3].series[0].label != "QueueSteady-send" {
		t.Fatalf("panels %q and %q (%q)", ps[2].title, ps[3].title, ps[3].series[0].label)
	}
	if ps[0].series[0].label != tailLabels["pagelog"] || ps[0].series[1].label != "tidwall/wal (peerbench)" {
		t.Fatalf("first panel's order: %q, %q", ps[0].series[0].label, ps[0].series[1].label)
	}
	out := t.TempDir()
	if err := write(out, ps); err != nil {
		t.Fatal(err)
	}
	txt, err := os.ReadFile(filepath.Join(out, "latency.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// pagelog: 100 ns + i%1000, p50 600 ns, p99 1.09 µs, max 100 µs.
	for _, want := range []string{"600 ns", "1.09 µs", "100 µs", "raft-wal (peerbench)", "QueueSteady-send"} {
		if !strings.Contains(string(txt), want) {
			t.Errorf("latency.txt lacks %q:\n%s", want, txt)
		}
	}
	f, err := os.Open(filepath.Join(out, "latency.svg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	lines := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("latency.svg: %v", err)
		}
		if s, ok := tok.(xml.StartElement); ok && s.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != len(files) {
		t.Fatalf("latency.svg has %d curves, want %d", lines, len(files))
	}
}

func TestLoadNothing(t *testing.T) {
	if _, err := load(t.TempDir()); err == nil {
		t.Fatal("an empty directory loaded without an error")
	}
}

func TestPercentLabel(t *testing.T) {
	got := []string{percentLabel(0), percentLabel(1), percentLabel(2), percentLabel(4)}
	if strings.Join(got, " ") != "0% 90% 99% 99.99%" {
		t.Fatalf("labels %v", got)
	}
}
