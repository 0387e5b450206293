package testkit

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Mapping is one line of /proc/self/maps.
type Mapping struct {
	Start, End uintptr
	Perms      string // as "r--s"
	Path       string // the file mapped, without " (deleted)"; "" for anonymous memory
	Deleted    bool   // the file was removed since it was mapped
}

func (m Mapping) String() string {
	s := m.Perms + " " + m.Path
	if m.Deleted {
		s += " (deleted)"
	}
	return s
}

// Mappings is a list of mappings; it prints one a line.
type Mappings []Mapping

func (ms Mappings) String() string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Maps returns the mappings of this process, from /proc/self/maps; it
// skips the test where there is none.
func Maps(t testing.TB) Mappings {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	var out Mappings
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
		m := Mapping{Start: uintptr(a), End: uintptr(b), Perms: fields[1]}
		if len(fields) >= 6 {
			m.Path = strings.Join(fields[5:], " ")
			m.Path, m.Deleted = strings.CutSuffix(m.Path, " (deleted)")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading /proc/self/maps: %v", err)
	}
	return out
}

// MapsUnder returns the mappings of this process of files under dir
// (removed ones too).
func MapsUnder(t testing.TB, dir string) Mappings {
	t.Helper()
	var out Mappings
	for _, m := range Maps(t) {
		if strings.HasPrefix(m.Path, dir+"/") {
			out = append(out, m)
		}
	}
	return out
}

// IsMapped reports whether this process maps the file at path (removed
// or not).
func IsMapped(t testing.TB, path string) bool {
	t.Helper()
	for _, m := range Maps(t) {
		if m.Path == path {
			return true
		}
	}
	return false
}

// Descriptor is a descriptor of this process open on a file.
type Descriptor struct {
	FD   int
	Path string // where /proc/self/fd says it points
}

// Descriptors is a list of descriptors; it prints one a line.
type Descriptors []Descriptor

func (ds Descriptors) String() string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "  %d -> %s\n", d.FD, d.Path)
	}
	return b.String()
}

// DescriptorsUnder returns the descriptors of this process open on files
// under dir, from /proc/self/fd; it skips the test where there is none.
func DescriptorsUnder(t testing.TB, dir string) Descriptors {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var out Descriptors
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(target, dir+"/") {
			continue // closed since the listing, or elsewhere
		}
		fd, _ := strconv.Atoi(e.Name())
		out = append(out, Descriptor{FD: fd, Path: target})
	}
	return out
}
