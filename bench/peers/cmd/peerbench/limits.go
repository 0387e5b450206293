package main

import (
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/pagelog/pagelog/mmapfile"
)

// limit is one of the machine's limits, measured in the same run.
type limit struct {
	ID        string  `json:"id"`
	Title     string  `json:"title"`
	P50ns     float64 `json:"p50_ns,omitempty"`
	P99ns     float64 `json:"p99_ns,omitempty"`
	NsPerOp   float64 `json:"ns_per_op,omitempty"`
	OpsPerSec float64 `json:"ops_per_s,omitempty"`
	MBps      float64 `json:"mb_per_s,omitempty"` // sequential bandwidth only
	Note      string  `json:"note,omitempty"`
}

// Limit ids, referred to by the ratios.
const (
	limCopy     = "copy-1KiB-mapped"
	limCRC      = "crc32c-1KiB"
	limCopyCRC  = "copy+crc-1KiB"
	limCopyCRC6 = "copy+crc-64B"
	limWrite    = "write-1KiB"
	limSync     = "fdatasync-4KiB-append"
	limSeq      = "seq-write"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// limitRun holds the samples of one limit from one or more passes.
type limitRun struct {
	id, title, note string
	lat             []time.Duration // per operation (micro limits: per op of a 64-op block)
	ops             int             // operations behind el
	el              time.Duration
	mbps            []float64 // sequential bandwidth, one per pass
}

// add pools another pass of the same limit.
func (r *limitRun) add(o *limitRun) {
	r.lat = append(r.lat, o.lat...)
	r.ops += o.ops
	r.el += o.el
	r.mbps = append(r.mbps, o.mbps...)
}

func (r *limitRun) summary() limit {
	l := limit{ID: r.id, Title: r.title, Note: r.note}
	if len(r.mbps) > 0 {
		var sum float64
		for _, v := range r.mbps {
			sum += v
		}
		l.MBps = sum / float64(len(r.mbps))
		return l
	}
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	n := len(lat)
	l.P50ns = float64(lat[n/2].Nanoseconds())
	l.P99ns = float64(lat[n*99/100].Nanoseconds())
	l.NsPerOp = float64(r.el.Nanoseconds()) / float64(r.ops)
	l.OpsPerSec = float64(r.ops) / r.el.Seconds()
	return l
}

// poolLimits merges passes of the limits (measured at the start and at the
// end of the run, so that drift in the machine weighs on both sides).
func poolLimits(passes ...[]*limitRun) []limit {
	var out []limit
	for i, r := range passes[0] {
		for _, p := range passes[1:] {
			r.add(p[i])
		}
		out = append(out, r.summary())
	}
	return out
}

// measureLimits measures the machine's limits in dir (on the disk under
// test), seq bytes of sequential bandwidth included.
func measureLimits(cfg config, dir string, seqBytes int64) ([]*limitRun, error) {
	const area = 4 << 20
	f, err := os.Create(filepath.Join(dir, "limit-mapped"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	defer os.Remove(f.Name())
	if err := mmapfile.Allocate(f, 0, area); err != nil {
		return nil, err
	}
	m, err := mmapfile.Map(f, area, true)
	if err != nil {
		return nil, err
	}
	defer mmapfile.Unmap(m)
	for i := 0; i < area; i += mmapfile.PageSize {
		m[i] = 0 // fault every page in first, as pagelog's writer does ahead of itself
	}
	body := makeBody(1024)
	budget := cfg.phase / 2
	var sum uint32
	lims := []*limitRun{
		micro(limCopy, "copy 1 KiB into a resident page of a mapped file", budget, func(i int) {
			copy(m[(i*1024)%area:], body)
		}),
		micro(limCRC, "CRC-32C of 1 KiB", budget, func(int) {
			sum += crc32.Checksum(body, castagnoli)
		}),
		micro(limCopyCRC, "copy 1 KiB into a mapped file + CRC-32C of it (an append's floor)", budget, func(i int) {
			at := (i * 1024) % area
			copy(m[at:], body)
			sum += crc32.Checksum(m[at:at+1024], castagnoli)
		}),
		micro(limCopyCRC6, "copy 64 B into a mapped file + CRC-32C of it", budget, func(i int) {
			at := (i * 64) % area
			copy(m[at:], body[:64])
			sum += crc32.Checksum(m[at:at+64], castagnoli)
		}),
	}
	sink += byte(sum)
	w, err := limitWrite(dir, budget)
	if err != nil {
		return nil, err
	}
	s, err := limitFdatasync(dir, cfg.phase)
	if err != nil {
		return nil, err
	}
	seq, err := limitSeq(dir, seqBytes)
	if err != nil {
		return nil, err
	}
	return append(lims, w, s, seq), nil
}

// micro measures an operation too short to time alone: ns/op over an
// untimed loop, p50 and p99 over blocks of 64 operations.
func micro(id, title string, budget time.Duration, op func(i int)) *limitRun {
	const block = 64
	deadline := time.Now().Add(budget)
	start := time.Now()
	n := 0
	for ; n < 1<<26; n++ {
		if n&1023 == 0 && time.Now().After(deadline) {
			break
		}
		op(n)
	}
	el := time.Since(start)
	blocks := make([]time.Duration, 4096)
	for b := range blocks {
		t := time.Now()
		for k := 0; k < block; k++ {
			op(b*block + k)
		}
		blocks[b] = time.Since(t) / block
	}
	return &limitRun{id: id, title: title, lat: blocks, ops: n, el: el,
		note: "p50/p99 per operation over timed blocks of 64"}
}

// timed keeps per-operation latencies.
func timed(id, title string, lat []time.Duration, el time.Duration) *limitRun {
	return &limitRun{id: id, title: title, lat: lat, ops: len(lat), el: el}
}

// limitWrite: one write() system call of 1 KiB into the page cache.
func limitWrite(dir string, budget time.Duration) (*limitRun, error) {
	f, err := os.Create(filepath.Join(dir, "limit-write"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	defer os.Remove(f.Name())
	body := makeBody(1024)
	lat := make([]time.Duration, 0, 1<<20)
	start := time.Now()
	for len(lat) < cap(lat) && time.Since(start) < budget {
		t := time.Now()
		if _, err := f.WriteAt(body, int64(len(lat)%65536)*1024); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
	}
	return timed(limWrite, "write() of 1 KiB (pwrite, page cache)", lat, time.Since(start)), nil
}

// limitFdatasync: append 4 KiB to a file, then fdatasync it: the least a
// record acknowledged after an fsync can cost.
func limitFdatasync(dir string, budget time.Duration) (*limitRun, error) {
	f, err := os.Create(filepath.Join(dir, "limit-fdatasync"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	defer os.Remove(f.Name())
	block := makeBody(4096)
	lat := make([]time.Duration, 0, 20_000)
	start := time.Now()
	for len(lat) < cap(lat) && (len(lat) < 50 || time.Since(start) < budget) {
		t := time.Now()
		if _, err := f.WriteAt(block, int64(len(lat))*4096); err != nil {
			return nil, err
		}
		if err := mmapfile.Datasync(f); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
	}
	return timed(limSync, "append 4 KiB to a file + fdatasync", lat, time.Since(start)), nil
}

// limitSeq: sequential write bandwidth to the disk: size bytes in 1 MiB
// write()s, then one fdatasync, timed together.
func limitSeq(dir string, size int64) (*limitRun, error) {
	name := filepath.Join(dir, "limit-seq")
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	defer os.Remove(name)
	defer f.Close()
	buf := makeBody(1 << 20)
	start := time.Now()
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
	}
	if err := mmapfile.Datasync(f); err != nil {
		return nil, err
	}
	el := time.Since(start)
	return &limitRun{
		id:    limSeq,
		title: "sequential write bandwidth (1 MiB writes, then fdatasync)",
		mbps:  []float64{float64(size) / 1e6 / el.Seconds()},
		note:  formatSize(size) + " written per pass, mean of the passes",
	}, nil
}

func formatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
