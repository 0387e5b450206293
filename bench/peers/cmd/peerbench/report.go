package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// result is one system's figures on one workload, pooled over the rounds.
type result struct {
	System      string  `json:"system"`
	Workload    string  `json:"workload"`
	Ops         int64   `json:"ops"`     // operations behind ops/s and allocations
	Samples     int     `json:"samples"` // timed operations behind p50/p99
	P50ns       float64 `json:"p50_ns"`
	P99ns       float64 `json:"p99_ns"`
	P999ns      float64 `json:"p999_ns"`
	MaxNs       float64 `json:"max_ns"`
	MeanNs      float64 `json:"mean_ns"`   // mean of the timed operations
	NsPerOp     float64 `json:"ns_per_op"` // wall time / operations (all writers together)
	OpsPerSec   float64 `json:"ops_per_s"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	Note        string  `json:"note,omitempty"`
	Error       string  `json:"error,omitempty"`
}

func (r result) ok() bool { return r.Error == "" && r.Ops > 0 }

type unsupported struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Why      string `json:"why"`
}

// ratio is a pagelog figure divided by another figure.
type ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Of    string  `json:"of"` // what is divided by what
}

// target is one of issue 5's targets, checked on this run.
type target struct {
	Name string  `json:"name"`
	Want string  `json:"want"`
	Got  float64 `json:"got"`
	Met  bool    `json:"met"`
	Text string  `json:"text"`
}

type systemInfo struct {
	Name  string `json:"name"`
	Setup string `json:"setup"`
}

type workloadInfo struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Size    int    `json:"size"`
	Sync    bool   `json:"sync"`
	Writers int    `json:"writers"`
}

// report is everything a run found; it is written as peers.json.
type report struct {
	Date            string         `json:"date"`
	CPU             string         `json:"cpu"`
	Cores           int            `json:"cores"`
	Go              string         `json:"go"`
	Kernel          string         `json:"kernel"`
	OSArch          string         `json:"os_arch"`
	Dir             string         `json:"dir"`
	Filesystem      string         `json:"filesystem"`
	Quick           bool           `json:"quick"`
	Rounds          int            `json:"rounds"`
	PhaseSeconds    float64        `json:"phase_seconds"`
	TimerOverheadNs float64        `json:"timer_overhead_ns"` // one time.Now + time.Since, included in every p50/p99
	Seconds         float64        `json:"seconds"`
	Systems         []systemInfo   `json:"systems"`
	Workloads       []workloadInfo `json:"workloads"`
	Limits          []limit        `json:"limits"`
	Results         []result       `json:"results"`
	Unsupported     []unsupported  `json:"unsupported"`
	Ratios          []ratio        `json:"ratios"`
	Targets         []target       `json:"targets"`

	works []workload
}

func newReport(cfg config, dir string) *report {
	return &report{
		Date:            time.Now().UTC().Format(time.RFC3339),
		CPU:             cpuModel(),
		Cores:           runtime.NumCPU(),
		Go:              runtime.Version(),
		Kernel:          strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		OSArch:          runtime.GOOS + "/" + runtime.GOARCH,
		Dir:             filepath.Dir(dir),
		Filesystem:      fsType(dir),
		Quick:           cfg.quick,
		Rounds:          cfg.rounds,
		PhaseSeconds:    cfg.phase.Seconds(),
		TimerOverheadNs: timerOverhead(),
	}
}

func (rep *report) describe(works []workload, systems []system) {
	rep.works = works
	for _, s := range systems {
		rep.Systems = append(rep.Systems, systemInfo{Name: s.name, Setup: s.setup})
	}
	for _, w := range works {
		rep.Workloads = append(rep.Workloads, workloadInfo{ID: w.ID, Title: w.Title, Size: w.Size, Sync: w.Sync, Writers: w.Writers})
	}
}

// find returns the result of system on workload.
func (rep *report) find(system, workload string) (result, bool) {
	for _, r := range rep.Results {
		if r.System == system && r.Workload == workload && r.ok() {
			return r, true
		}
	}
	return result{}, false
}

func (rep *report) limit(id string) (limit, bool) {
	for _, l := range rep.Limits {
		if l.ID == id {
			return l, true
		}
	}
	return limit{}, false
}

// fastestPeer returns the peer with the most operations per second on w.
func (rep *report) fastestPeer(w string) (result, bool) {
	var best result
	found := false
	for _, r := range rep.Results {
		if r.Workload == w && r.System != "pagelog" && r.ok() && (!found || r.OpsPerSec > best.OpsPerSec) {
			best, found = r, true
		}
	}
	return best, found
}

func (rep *report) write(dir string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "peers.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "peers.txt"), []byte(rep.text()), 0o644); err != nil {
		return err
	}
	return rep.chart(filepath.Join(dir, "peers.png"))
}

func cpuModel() string {
	sc := bufio.NewScanner(strings.NewReader(readFile("/proc/cpuinfo")))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// fsType returns the type of the filesystem that holds dir, from the
// mount table (the longest mount point that is a prefix of dir).
func fsType(dir string) string {
	best, typ := "", "unknown"
	for _, line := range strings.Split(readFile("/proc/self/mounts"), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best, typ = mp, f[2]
		}
	}
	return typ
}

func readFile(name string) string {
	b, _ := os.ReadFile(name)
	return string(b)
}

// timerOverhead is the median cost of the timing around each operation.
func timerOverhead() float64 {
	d := make([]time.Duration, 100_000)
	for i := range d {
		t := time.Now()
		d[i] = time.Since(t)
	}
	slices.Sort(d)
	return float64(d[len(d)/2].Nanoseconds())
}

// fmtNs renders nanoseconds with three significant digits.
func fmtNs(ns float64) string {
	switch {
	case ns <= 0:
		return "-"
	case ns < 1000:
		return fmt.Sprintf("%.3g ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	}
	return fmt.Sprintf("%.3g s", ns/1e9)
}

// fmtRate renders operations per second.
func fmtRate(r float64) string {
	switch {
	case r <= 0:
		return "-"
	case r >= 1e6:
		return fmt.Sprintf("%.3g M/s", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.3g k/s", r/1e3)
	}
	return fmt.Sprintf("%.3g /s", r)
}

func fmtX(x float64) string {
	if x >= 100 {
		return fmt.Sprintf("%.0fx", x)
	}
	return fmt.Sprintf("%.3gx", x)
}
