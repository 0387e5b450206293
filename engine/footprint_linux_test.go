package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What a log holds ahead of its records: allocated on disk, and in memory.
// An idle or slow log keeps at most about this much past its end; a busy
// one more (prefaultAhead, and a prepared segment), given back once it is
// idle for idleAfter.
const aheadBound = 1 << 20

// logFootprint returns the disk blocks of every file in dir (st_blocks) and
// how much of them is in the page cache (mincore over a mapping of each).
func logFootprint(t *testing.T, dir string) (disk, cached int64) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // a file the log removed meanwhile
			}
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		disk += st.Blocks * 512
		cached += cachedBytes(t, path)
	}
	return disk, cached
}

// cachedBytes returns how much of the file at path is in the page cache.
func cachedBytes(t *testing.T, path string) int64 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return 0 // removed meanwhile
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size == 0 {
		return 0
	}
	m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := unix.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := int64(0)
	for _, v := range vec {
		n += int64(v&1) * int64(page)
	}
	return n
}

// aheadOfEnd returns what the log's files take on disk and in the page
// cache beyond the bytes of its records.
func aheadOfEnd(t *testing.T, l *Log) (disk, cached int64) {
	t.Helper()
	d, c := logFootprint(t, l.Dir())
	records := l.Stats().Bytes
	return d - records, c - records
}

// waitIdle waits for the log to be idle: the prefaulter has filled what
// it keeps ahead of the writer and parked, at the nearest distance (a
// first pass may double it, as for a writer that caught up; it comes back
// down idleAfter later, when settle gives back what lies past it).
func waitIdle(t *testing.T, l *Log) {
	t.Helper()
	waitFor(t, "the prefaulter to settle at the nearest distance and park", func() bool {
		ok, _, _ := prefaultCaughtUp(l)
		return ok && !l.pre.polling.Load() && l.pre.ahead.Load() == l.pre.minAhead
	})
}

// A new log with one small record keeps at most aheadBound past it, on
// disk and in memory: a program with a hundred such logs does not pay
// gigabytes (it paid about 10 MiB of disk and 20 MiB of memory each: 8 MiB
// faulted in ahead through two mappings, in 2 MiB allocation steps).
func TestIdleLogKeepsLittleAhead(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	if _, err := l.Append(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, l)
	disk, cached := aheadOfEnd(t, l)
	if disk > aheadBound || cached > aheadBound {
		t.Fatalf("a log of one record holds %d bytes of disk and %d of page cache past it; want at most %d", disk, cached, aheadBound)
	}
	if l.active.Populated() < l.active.End()+prefaultMin-l.pre.step.Load() {
		t.Fatalf("nothing faulted in ahead of the writer: %d populated, end %d", l.active.Populated(), l.active.End())
	}
}

// After a burst of appends past half a segment (the next segment
// prepared, the prefaulter far ahead) the log, once idle, gives back what
// it holds ahead beyond aheadBound; records appended after that read back
// (with RetireMappings the cut part of the read-only mapping was replaced
// by zero pages and must be mapped again as the file grows).
func TestBurstThenIdleReturnsToBound(t *testing.T) {
	for _, retire := range []bool{false, true} {
		t.Run(map[bool]string{false: "mapped", true: "retire-mappings"}[retire], func(t *testing.T) {
			const seg = 16 << 20
			l := mustOpen(t, t.TempDir(), Options{SegmentBytes: seg, RetireMappings: retire})
			const size = 1000
			n := uint64(0)
			burst := func(bytes int64) {
				for end := l.Stats().Bytes + bytes; l.Stats().Bytes < end; n++ {
					if _, err := l.Append(testBody(n, size)); err != nil {
						t.Fatal(err)
					}
				}
			}
			burst(seg * 5 / 8) // past half: the next segment is prepared
			waitFor(t, "the next segment to be prepared", func() bool { return l.holdsPrepared() })
			waitFor(t, "the log to give back what it holds ahead", func() bool {
				disk, cached := aheadOfEnd(t, l)
				return disk <= aheadBound && cached <= aheadBound
			})
			if l.holdsPrepared() {
				t.Fatal("an idle log keeps a segment prepared for its next roll")
			}
			burst(seg) // on through a roll, made by the roll itself or prepared again
			for i := uint64(0); i < n; i++ {
				r, err := l.Read(i)
				if err != nil || !bytes.Equal(r.Body, testBody(i, size)) {
					t.Fatalf("Read(%d) after the log gave back its space: %v", i, err)
				}
				r.Release()
			}
			if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
				t.Fatalf("Verify: %+v, %v", rep, err)
			}
		})
	}
}

// The distance ahead follows the rate of appends: up at once when a look
// measures a fast writer or finds the writer caught up with what is
// faulted in; down only when asked to (the log went idle, see settle),
// never at a look while the writer goes on, however slow it measured.
func TestAheadFollowsAppendRate(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	p := &prefaulter{minAhead: prefaultMin, maxAhead: prefaultAhead}
	p.setAhead(p.minAhead)
	r := &segmentRef{s: l.active}
	now := time.Now()
	p.seenAt = now
	look := func(after time.Duration, appended int64, caught, lower bool) bool {
		now = now.Add(after)
		r.before += appended
		return p.adapt(r, now, caught, lower)
	}
	if busier := look(time.Second, 64<<10, false, false); busier || p.ahead.Load() != prefaultMin {
		t.Fatalf("64 KiB a second: %d ahead, want %d", p.ahead.Load(), prefaultMin)
	}
	// Caught up: doubled, whatever the rate.
	if busier := look(time.Second, 64<<10, true, false); !busier || p.ahead.Load() != 2*prefaultMin {
		t.Fatalf("caught up: %d ahead (busier %v), want %d", p.ahead.Load(), busier, 2*prefaultMin)
	}
	// 1 GB/s: 100 MB in the horizon, more than the farthest.
	if busier := look(time.Millisecond, 1<<20, false, false); busier || p.ahead.Load() != prefaultAhead {
		t.Fatalf("1 GB/s: %d ahead (busier %v), want %d", p.ahead.Load(), busier, prefaultAhead)
	}
	if p.step.Load() != prefaultStep {
		t.Fatalf("step %d at the farthest distance, want %d", p.step.Load(), prefaultStep)
	}
	if look(time.Second, 4<<10, false, false); p.ahead.Load() != prefaultAhead {
		t.Fatalf("a slow look while the writer goes on brought the distance to %d", p.ahead.Load())
	}
	// 10 MB/s, lowered: 1 MiB in the horizon.
	if look(100*time.Millisecond, 1<<20, false, true); p.ahead.Load() != 1<<20 {
		t.Fatalf("10 MB/s, lowered: %d ahead, want %d", p.ahead.Load(), 1<<20)
	}
	if look(idleAfter, 0, false, true); p.ahead.Load() != prefaultMin || p.step.Load() != prefaultMin/2 {
		t.Fatalf("idle, lowered: %d ahead, step %d", p.ahead.Load(), p.step.Load())
	}
}

// On a full file system, a log that gave back its space ahead (idle) and
// grows again in steps fails the append that needs the next step with
// ENOSPC, never a fault; what was acknowledged reads back.
func TestFullDiskAfterIdleGivesENOSPC(t *testing.T) {
	fsdir := mountTmpfs(t, "12m")
	dir := filepath.Join(fsdir, "log")
	l := mustOpen(t, dir, Options{})
	const size = 1000
	n := uint64(0)
	add := func() error {
		_, err := l.Append(testBody(n, size))
		if err == nil {
			n++
		}
		return err
	}
	for l.Stats().Bytes < 4<<20 {
		if err := add(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the log to give back what it holds ahead", func() bool {
		disk, _ := aheadOfEnd(t, l)
		return disk <= aheadBound
	})
	var err error
	noFault(t, "appends into a full tmpfs", func() {
		for i := 0; i < 1<<20; i++ {
			if err = add(); err != nil {
				return
			}
		}
	})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the file system: %v after %d appends, want ENOSPC", err, n)
	}
	for i := uint64(0); i < n; i++ {
		r, err := l.Read(i)
		if err != nil || !bytes.Equal(r.Body, testBody(i, size)) {
			t.Fatalf("Read(%d) on a full disk: %v", i, err)
		}
		r.Release()
	}
}
