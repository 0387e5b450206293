package queue

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// mapping is one line of /proc/self/maps.
type mapping struct {
	start, end uintptr
	perms      string
	path       string
}

func procMaps(t testing.TB) []mapping {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		m := mapping{start: uintptr(a), end: uintptr(b), perms: fields[1]}
		if len(fields) >= 6 {
			m.path = strings.Join(fields[5:], " ")
		}
		out = append(out, m)
	}
	return out
}
