package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"runtime"
	"strconv"
)

// usage is what the process holds at one moment. A figure the platform
// cannot tell (no /proc) is -1.
type usage struct {
	RSSBytes   int64 `json:"rss_bytes"`  // VmRSS of /proc/self/status
	FDs        int   `json:"fds"`        // entries of /proc/self/fd, the probe's own left out
	Maps       int   `json:"maps"`       // lines of /proc/self/maps
	Goroutines int   `json:"goroutines"` // runtime.NumGoroutine
}

// probe reads /proc/self through files it opened at the start, so that it
// still answers when a system has used up every descriptor the process may
// have.
type probe struct {
	status, fd, maps *os.File
}

func newProbe() *probe {
	p := &probe{}
	p.status, _ = os.Open("/proc/self/status")
	p.fd, _ = os.Open("/proc/self/fd")
	p.maps, _ = os.Open("/proc/self/maps")
	return p
}

func (p *probe) close() {
	for _, f := range []*os.File{p.status, p.fd, p.maps} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *probe) usage() usage {
	return usage{RSSBytes: p.rss(), FDs: p.fds(), Maps: p.mapCount(), Goroutines: runtime.NumGoroutine()}
}

// reread returns the whole of f from its start (a /proc file is made anew
// at each read from offset 0).
func reread(f *os.File) ([]byte, error) {
	if f == nil {
		return nil, os.ErrNotExist
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

func (p *probe) rss() int64 {
	b, err := reread(p.status)
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "VmRSS:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

func (p *probe) fds() int {
	if p.fd == nil {
		return -1
	}
	if _, err := p.fd.Seek(0, io.SeekStart); err != nil {
		return -1
	}
	names, err := p.fd.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return len(names) - 3 // the probe's own three files
}

func (p *probe) mapCount() int {
	b, err := reread(p.maps)
	if err != nil {
		return -1
	}
	return bytes.Count(b, []byte{'\n'})
}

// sysctlInt reads a number from /proc/sys (-1 when it cannot).
func sysctlInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}
