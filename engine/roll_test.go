package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/mmapfile"
)

// diskBytes is how much disk the regular files of dir take.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		n += blocksOf(st)
	}
	return n
}

// A new log takes disk as it fills, not SegmentBytes up front.
func TestNewLogAllocatesInSteps(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	defer l.Close()
	for i := range 3 {
		if _, err := l.Append(testBody(uint64(i), 100)); err != nil {
			t.Fatal(err)
		}
	}
	// The prefaulter allocates ahead of the writer (8 MiB at most).
	time.Sleep(50 * time.Millisecond)
	if n := diskBytes(t, dir); n > 12<<20 {
		t.Fatalf("a log of three records takes %d bytes of disk, want well under the %d of a segment", n, DefaultSegmentBytes)
	}
	// Appending on allocates on: a record never lands past the file's end.
	body := make([]byte, 64<<10)
	for range 400 { // 25 MiB
		if _, err := l.Append(body); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
}

// A full disk in the middle of a segment (its next allocation step) fails
// the append that needs it, writes nothing, and appends go on once there is
// space again.
func TestFullDiskInsideSegment(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	opts := Options{}
	opts.allocate = func(f *os.File, off, n int64) error {
		if full.Load() && strings.HasSuffix(f.Name(), segment.LogSuffix) {
			return syscall.ENOSPC
		}
		return mmapfile.Allocate(f, off, n)
	}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	body := make([]byte, 32<<10)
	full.Store(true)
	var acked uint64
	var err error
	for i := 0; i < 2048 && err == nil; i++ { // up to 64 MiB: past every step allocated so far
		_, err = l.Append(body)
		if err == nil {
			acked++
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("appending with the disk full: %v after %d appends, want ENOSPC", err, acked)
	}
	if l.Next() != acked {
		t.Fatalf("Next = %d after a failed append, want %d", l.Next(), acked)
	}
	full.Store(false)
	if off, err := l.Append(body); err != nil || off != acked {
		t.Fatalf("Append once there is space: %d, %v; want %d", off, err, acked)
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
}

// The prepared next segment is not part of the log: readers ignore its
// files, Close removes them, and a writable open removes those a crash
// left behind.
func TestPreparedSegmentFiles(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 64 << 10
	l := mustOpen(t, dir, Options{SegmentBytes: segBytes})
	sizes := appendN(t, l, 40, func(uint64) int { return 1000 }) // past half the segment
	prepared := filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(prepared); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no segment was prepared past half of the active one")
		}
		time.Sleep(time.Millisecond)
	}
	ro := mustOpenRO(t, dir, Options{})
	if ro.Next() != l.Next() {
		t.Fatalf("read-only Next = %d, want %d", ro.Next(), l.Next())
	}
	if rep, err := ro.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("read-only Verify beside a prepared segment: %v %+v", err, rep)
	}
	ro.Close()
	// Rolls take the prepared segment: the log reads back whole.
	sizes = append(sizes, appendN(t, l, 200, func(uint64) int { return 1000 })...)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(prepared); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the prepared segment behind: %v", err)
	}
	checkLayout(t, dir, 0, sizes, segBytes)

	// Leftovers of a crash: removed by a writable open, and noted.
	for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
		if err := os.WriteFile(filepath.Join(dir, segment.PreparedPrefix+suffix), make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	if _, err := os.Stat(prepared); !errors.Is(err, os.ErrNotExist) && l.Recovery().Notes == nil {
		t.Fatalf("a writable open kept a leftover prepared segment")
	}
	found := false
	for _, n := range l.Recovery().Notes {
		found = found || strings.Contains(n, segment.PreparedPrefix)
	}
	if !found {
		t.Fatalf("the removal of the leftover prepared segment is not in the report: %q", l.Recovery().Notes)
	}
	checkAll(t, l, 0, sizes)
}

// A prepared segment whose files were replaced behind the log's back is not
// activated: the roll creates a segment instead, and nothing is lost.
func TestPreparedSegmentReplaced(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 64 << 10
	l := mustOpen(t, dir, Options{SegmentBytes: segBytes})
	defer l.Close()
	sizes := appendN(t, l, 40, func(uint64) int { return 1000 })
	prepared := filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)
	deadline := time.Now().Add(time.Minute)
	for {
		l.rolls.mu.Lock()
		ready := l.rolls.prepared != nil
		l.rolls.mu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no segment was prepared")
		}
		time.Sleep(time.Millisecond)
	}
	if err := os.Remove(prepared); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prepared, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	sizes = append(sizes, appendN(t, l, 100, func(uint64) int { return 1000 })...)
	checkAll(t, l, 0, sizes)
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
}
