package bench

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
	"golang.org/x/sys/unix"
)

// BenchmarkIdleLogFootprint: what an idle log costs. 100 logs are opened
// in one process, one 100-byte record appended to each, and once their
// background work has settled it reports per log: the disk its files take
// (st_blocks), the page cache they hold (mincore: memory, whether mapped or
// not), the resident size of the process's mappings of them (smaps Rss:
// the writable and the read-only mapping of a page count twice), the
// descriptors and mappings of its files, its goroutines, and the time of
// Open and the first Append. state=after-burst appends 32 MiB of 1 KiB
// records to each of 4 logs first, then waits for them to go idle (the
// records themselves are then in the disk and cache figures, and twice in
// rss).
//
//	go test -run '^$' -bench IdleLogFootprint -benchtime 1x -count 5 ./bench/
func BenchmarkIdleLogFootprint(b *testing.B) {
	b.Run("state=fresh", func(b *testing.B) { idleFootprint(b, 100, 0) })
	b.Run("state=after-burst", func(b *testing.B) { idleFootprint(b, 4, 32<<20) })
}

func idleFootprint(b *testing.B, logs int, burst int) {
	for range b.N {
		root, err := os.MkdirTemp(scratch, "footprint-")
		if err != nil {
			b.Fatal(err)
		}
		g0 := runtime.NumGoroutine()
		ls := make([]*engine.Log, logs)
		var opening time.Duration
		body := make([]byte, 100)
		for i := range ls {
			start := time.Now()
			l, err := engine.Open(filepath.Join(root, strconv.Itoa(i)), engine.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Append(body); err != nil {
				b.Fatal(err)
			}
			opening += time.Since(start)
			ls[i] = l
		}
		big := make([]byte, 1024)
		for _, l := range ls {
			for n := 0; n < burst; n += len(big) + 16 {
				if _, err := l.Append(big); err != nil {
					b.Fatal(err)
				}
			}
		}
		// Settled: past the engine's idle delay (a second without appends),
		// the figures stop changing (the background work ahead of the
		// writers, and after a burst the return to idle).
		time.Sleep(1500 * time.Millisecond)
		var f footprint
		for deadline, last := time.Now().Add(30*time.Second), (footprint{}); ; last = f {
			time.Sleep(200 * time.Millisecond)
			f = measureFootprint(b, root)
			if f == last || time.Now().After(deadline) {
				break
			}
		}
		n := float64(logs)
		b.ReportMetric(float64(f.disk)/n, "disk-B/log")
		b.ReportMetric(float64(f.cached)/n, "cached-B/log")
		b.ReportMetric(float64(f.rss)/n, "rss-B/log")
		b.ReportMetric(float64(f.fds)/n, "fds/log")
		b.ReportMetric(float64(f.maps)/n, "maps/log")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/log")
		b.ReportMetric(float64(opening.Nanoseconds())/n, "open+append-ns/log")
		b.ReportMetric(float64(burst), "burst-B")
		for _, l := range ls {
			_ = l.Close()
		}
		_ = os.RemoveAll(root)
	}
}

// footprint is what the files under a directory cost the process.
type footprint struct {
	disk, cached, rss int64
	fds, maps         int
}

func measureFootprint(b *testing.B, root string) footprint {
	b.Helper()
	var f footprint
	err := filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		f.disk += testkit.DiskBytes(fi)
		f.cached += cachedBytes(path, fi.Size())
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	f.fds = len(testkit.DescriptorsUnder(b, root))
	sm, err := os.Open("/proc/self/smaps")
	if err != nil {
		b.Fatal(err)
	}
	defer sm.Close()
	in := false
	sc := bufio.NewScanner(sm)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && strings.HasPrefix(fields[5], root+"/")
			if in {
				f.maps++
			}
			continue
		}
		if in && len(fields) >= 2 && fields[0] == "Rss:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			f.rss += kb << 10
		}
	}
	return f
}

// cachedBytes returns how much of the file at path is in the page cache.
func cachedBytes(path string, size int64) int64 {
	if size == 0 {
		return 0
	}
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0
	}
	n := int64(0)
	for _, v := range vec {
		if v&1 != 0 {
			n += int64(page)
		}
	}
	return n
}
