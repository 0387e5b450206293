package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// processFigures reads this process's resident memory, open descriptors
// and memory mappings from /proc (ok false when it cannot).
func processFigures() (rss int64, fds, maps int, ok bool) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0, false
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmRSS:" {
			kb, _ := strconv.ParseInt(string(f[1]), 10, 64)
			rss = kb << 10
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, 0, 0, false
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		maps++
	}
	return rss, len(ents) - 1, maps, sc.Err() == nil // less the descriptor ReadDir used
}
