package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// logOwner finds the process that has the log in dir open for writing (it
// holds a flock on dir/LOCK: /proc/locks names it) and counts the distinct
// segment .log files of dir in its mappings (/proc/<pid>/maps): the figure
// its own Log.Stats calls MappedSegments, read from outside. pid is 0 when
// no process holds the lock (then nothing is mapped by a writer); known is
// false when it cannot be told (no /proc, or the owner's maps are not ours
// to read).
func logOwner(dir string) (pid, mapped int, known bool) {
	st, err := os.Stat(filepath.Join(dir, "LOCK"))
	if err != nil {
		return 0, 0, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	// /proc/locks: "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF", the
	// device's major and minor in hex, the inode in decimal.
	dev := uint64(sys.Dev)
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), sys.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && fields[1] == "FLOCK" && fields[5] == want {
			if p, err := strconv.Atoi(fields[4]); err == nil && p > 0 {
				pid = p
				break
			}
		}
	}
	if pid == 0 {
		return 0, 0, sc.Err() == nil
	}
	mapped, err = mappedSegments(pid, dir)
	return pid, mapped, err == nil
}

// mappedSegments counts the distinct segment .log files of dir that
// process pid maps (files it dropped but still maps are not counted: they
// are no longer the log's).
func mappedSegments(pid int, dir string) (int, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return 0, err
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		path := line[i:]
		if filepath.Dir(path) == real && isSegmentLog(filepath.Base(path)) {
			seen[path] = true
		}
	}
	return len(seen), sc.Err()
}

// isSegmentLog reports whether name is a segment's .log: twenty digits.
func isSegmentLog(name string) bool {
	base, ok := strings.CutSuffix(name, ".log")
	if !ok || len(base) != 20 {
		return false
	}
	for _, c := range base {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// storeOwner is logOwner for a store: the process holding the lock of
// its names log, and the segments of its message log that process maps.
func storeOwner(dir string) (pid, mapped int, known bool) {
	pid, _, known = logOwner(filepath.Join(dir, storeNamesDir))
	if !known || pid == 0 {
		return pid, 0, known
	}
	mapped, err := mappedSegments(pid, filepath.Join(dir, storeMessagesDir))
	return pid, mapped, err == nil
}
