package segment

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pagelog/pagelog/mmapfile"
)

// resident counts the pages of m that are in memory (mincore).
func resident(t *testing.T, m []byte) (in, all int) {
	t.Helper()
	vec := make([]byte, (len(m)+mmapfile.PageSize-1)/mmapfile.PageSize)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		if v&1 != 0 {
			in++
		}
	}
	return in, len(vec)
}

// The prefaulter takes the index files' page faults too, so that the
// writer never starts an index page itself (each one was a ~20 µs stall).
func TestPrefaultPopulatesIndex(t *testing.T) {
	cfg := testConfig(t, 64<<20, 4096)
	s, err := Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := s.idx.Load()
	if in, _ := resident(t, x.offMap); in != 0 {
		t.Logf("%d index pages resident before the prefault", in)
	}
	s.Prefault(1<<20, allocStep)
	for name, m := range map[string][]byte{"index": x.offMap, "time index": x.timMap} {
		if in, all := resident(t, m); in != all {
			t.Errorf("%s: %d of %d pages resident after the prefault", name, in, all)
		}
	}
	// Entries still go where they belong: the touches changed no byte.
	for i := range 3000 {
		if _, _, err := s.Append(nil, body(uint64(i), 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if n := x.entries(); n == 0 {
		t.Fatal("no index entries")
	}
	for off := uint64(0); off < 3000; off += 97 {
		if _, _, err := s.Read(off); err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
	}
}
