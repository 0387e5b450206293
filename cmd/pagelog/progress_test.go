package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestIsTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is not a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file is not a terminal")
	}
	if newProgress(f, "x", 10, nil) != nil {
		t.Error("a bar was made for a regular file")
	}
	var p *progress // what newProgress gives for a non-terminal: usable
	p.update(5)
	p.finish()
	if ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0); err == nil {
		defer ptm.Close()
		if !isTerminal(ptm) {
			t.Error("/dev/ptmx is a terminal")
		}
	}
}

func TestProgressDraw(t *testing.T) {
	var b bytes.Buffer
	start := time.Now()
	p := &progress{w: &b, label: "verify", total: 2_000_000_000, unit: formatBytes, tick: time.Hour, start: start}
	if got, want := p.line(500_000_000, start.Add(1500*time.Millisecond)),
		"verify [=======>                      ]  25% 500.00 MB/2.00 GB 1.5s"; got != want {
		t.Errorf("line:\n got %q\nwant %q", got, want)
	}
	p.update(1)
	p.update(2) // within the tick: not drawn
	p.update(p.total)
	p.finish()
	if n := strings.Count(b.String(), "\r"); n != 3 { // two draws and the erase
		t.Errorf("drew %d times: %q", n, b.String())
	}
	if !strings.HasSuffix(b.String(), "\r\x1b[K") {
		t.Errorf("the bar is not erased at the end: %q", b.String())
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.00 kB", 1_040_000_000: "1.04 GB", 5 << 40: "5.50 TB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPercentileAndDurations(t *testing.T) {
	lat := make([]time.Duration, 100)
	for i := range lat {
		lat[i] = time.Duration(i+1) * time.Microsecond
	}
	if p := percentile(lat, 0.50); p != 50*time.Microsecond {
		t.Errorf("p50 = %v", p)
	}
	if p := percentile(lat, 0.99); p != 99*time.Microsecond {
		t.Errorf("p99 = %v", p)
	}
	if p := percentile(lat[:1], 0.99); p != time.Microsecond {
		t.Errorf("p99 of one = %v", p)
	}
	for d, want := range map[time.Duration]string{812: "812ns", 1250: "1.25µs", 3_400_000: "3.40ms", 1_234_000_000: "1.23s"} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%d) = %q, want %q", d, got, want)
		}
	}
}
