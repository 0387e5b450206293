package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pagelog/pagelog/mmapfile"
)

// reader reads random offsets below Next and iterates short stretches with
// Records until done is closed and it has read at least minReads records,
// checking every record with check.
func reader(t *testing.T, l *Log, seed uint64, done <-chan struct{}, minReads int, check func(off uint64, body []byte) bool) {
	rng := rand.New(rand.NewPCG(seed, 99))
	reads := 0
	for {
		select {
		case <-done:
			if reads >= minReads {
				return
			}
		default:
		}
		next := l.Next()
		if next == 0 {
			continue
		}
		if reads%64 == 63 {
			from := rng.Uint64N(next)
			want, stopped := from, false
			for r, err := range l.Records(from) {
				if err != nil || r.Offset != want || !check(r.Offset, r.Body) {
					t.Errorf("Records(%d): at %d got offset %d, %v", from, want, r.Offset, err)
					return
				}
				if want++; want-from == 100 {
					stopped = true
					break
				}
			}
			if !stopped && want < next {
				t.Errorf("Records(%d) stopped at %d below Next %d", from, want, next)
				return
			}
		}
		off := rng.Uint64N(next)
		r, err := l.Read(off)
		if err != nil {
			t.Errorf("Read(%d) with Next %d: %v", off, next, err)
			return
		}
		if r.Offset != off || !check(off, r.Body) {
			t.Errorf("Read(%d): wrong record", off)
		}
		r.Release()
		reads++
	}
}

func TestConcurrentReadersOneWriter(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 16 << 10})
	const total = 4000
	done := make(chan struct{})
	var wg sync.WaitGroup
	check := func(off uint64, body []byte) bool { return bytes.Equal(body, testBody(off, mixedSize(off))) }
	for i := range 4 {
		spawn(&wg, func() { reader(t, l, uint64(i), done, 500, check) })
	}
	spawn(&wg, func() {
		defer close(done)
		for range total {
			want := l.Next()
			off, err := l.Append(testBody(want, mixedSize(want)))
			if err != nil || off != want {
				t.Errorf("Append: %d, %v; want %d", off, err, want)
				return
			}
		}
	})
	wg.Wait()
	if n := len(logFiles(t, l.Dir())); n < 20 {
		t.Fatalf("only %d segments: the test did not roll across many", n)
	}
}

// taggedBody is a self-describing body: writer, sequence number, then bytes
// derived from both.
func taggedBody(w byte, seq uint64) []byte {
	n := 9 + int(seq*uint64(w+3)%500)
	b := make([]byte, n)
	b[0] = w
	binary.BigEndian.PutUint64(b[1:], seq)
	for i := 9; i < n; i++ {
		b[i] = byte(seq*13 + uint64(i)*uint64(w+1))
	}
	return b
}

func checkTagged(body []byte) bool {
	if len(body) < 9 {
		return false
	}
	return bytes.Equal(body, taggedBody(body[0], binary.BigEndian.Uint64(body[1:])))
}

func TestConcurrentReadersTwoWriters(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 16 << 10})
	const perWriter = 1500
	done := make(chan struct{})
	var readers, writers sync.WaitGroup
	for i := range 4 {
		spawn(&readers, func() {
			reader(t, l, uint64(i), done, 500, func(_ uint64, body []byte) bool { return checkTagged(body) })
		})
	}
	offsets := make([][]uint64, 2)
	for w := range 2 {
		spawn(&writers, func() {
			for seq := range uint64(perWriter) {
				off, err := l.Append(taggedBody(byte(w), seq))
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				offsets[w] = append(offsets[w], off)
			}
		})
	}
	writers.Wait()
	close(done)
	readers.Wait()
	seen := make(map[uint64]bool)
	for w, offs := range offsets {
		for seq, off := range offs {
			if seq > 0 && off <= offs[seq-1] {
				t.Fatalf("writer %d got offset %d after %d", w, off, offs[seq-1])
			}
			if seen[off] {
				t.Fatalf("offset %d handed out twice", off)
			}
			seen[off] = true
			r, err := l.Read(off)
			if err != nil || !bytes.Equal(r.Body, taggedBody(byte(w), uint64(seq))) {
				t.Fatalf("Read(%d): %v, not writer %d's record %d", off, err, w, seq)
			}
			r.Release()
		}
	}
	if l.Next() != 2*perWriter || len(seen) != 2*perWriter {
		t.Fatalf("Next %d, %d offsets, want %d", l.Next(), len(seen), 2*perWriter)
	}
}

// TestReadOnlyBesideWriter reads a read-only view while the writer appends
// and rolls.
func TestReadOnlyBesideWriter(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 8192})
	sizes := appendN(t, w, 300, mixedSize)
	ro := mustOpenRO(t, dir, Options{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	check := func(off uint64, body []byte) bool { return bytes.Equal(body, testBody(off, mixedSize(off))) }
	for i := range 2 {
		spawn(&wg, func() { reader(t, ro, uint64(i+10), done, 300, check) })
	}
	spawn(&wg, func() {
		defer close(done)
		for range 1500 {
			want := w.Next()
			if _, err := w.Append(testBody(want, mixedSize(want))); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	// A read-only log follows the writer (see Wait).
	if ro.Next() != 1800 {
		t.Fatalf("read-only Next is %d after the writer reached 1800", ro.Next())
	}
	for off := uint64(300); off < 1800; off++ {
		sizes = append(sizes, mixedSize(off)+headerSize)
	}
	checkAll(t, ro, 0, sizes)
}

func TestSyncAlwaysGroupCommit(t *testing.T) {
	var syncs atomic.Int64
	opts := Options{Sync: SyncAlways, SegmentBytes: 32 << 10}
	opts.datasync = func(f *os.File) error {
		syncs.Add(1)
		return mmapfile.Datasync(f)
	}
	l := mustOpen(t, t.TempDir(), opts)
	const appenders, each = 4, 40
	var wg sync.WaitGroup
	for i := range appenders {
		spawn(&wg, func() {
			for seq := range uint64(each) {
				off, err := l.Append(taggedBody(byte(i), seq))
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				if d := l.Durable(); d <= off {
					t.Errorf("Append(SyncAlways) returned offset %d with Durable %d", off, d)
				}
			}
		})
	}
	wg.Wait()
	if syncs.Load() == 0 || l.Durable() != appenders*each {
		t.Fatalf("%d syncs, Durable %d", syncs.Load(), l.Durable())
	}
}

func TestSyncAndWaitDurable(t *testing.T) {
	var syncs atomic.Int64
	var fail atomic.Bool
	opts := Options{SegmentBytes: 1 << 20}
	opts.datasync = func(f *os.File) error {
		syncs.Add(1)
		if fail.Load() {
			return errors.New("injected EIO")
		}
		return mmapfile.Datasync(f)
	}
	l := mustOpen(t, t.TempDir(), opts)
	appendN(t, l, 10, mixedSize)
	if l.Durable() != 0 || syncs.Load() != 0 {
		t.Fatalf("SyncNone synced: Durable %d, %d syncs", l.Durable(), syncs.Load())
	}
	if err := l.WaitDurable(context.Background(), 4); err != nil || l.Durable() < 5 {
		t.Fatalf("WaitDurable(4): %v, Durable %d", err, l.Durable())
	}
	if err := l.WaitDurable(context.Background(), 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("WaitDurable(Next): %v, want ErrNotFound", err)
	}
	appendN(t, l, 5, mixedSize)
	n := syncs.Load()
	if err := l.Sync(); err != nil || l.Durable() != 15 || syncs.Load() == n {
		t.Fatalf("Sync: %v, Durable %d", err, l.Durable())
	}
	fail.Store(true)
	appendN(t, l, 1, mixedSize)
	if err := l.Sync(); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Sync with a failing fdatasync: %v, want ErrSyncFailed", err)
	}
	fail.Store(false)
	if _, err := l.Append(nil); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Append after a failed sync: %v, want ErrSyncFailed", err)
	}
	if l.Durable() != 15 {
		t.Fatalf("Durable %d after a failed sync, want 15", l.Durable())
	}
	ro := mustOpenRO(t, l.Dir(), Options{})
	if err := ro.Sync(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Sync on a read-only log: %v", err)
	}
	if err := ro.WaitDurable(context.Background(), 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WaitDurable on a read-only log: %v", err)
	}
}

// TestSyncCoversSealedSegments: under SyncNone, segments are sealed without
// an fdatasync; a later Sync promises every record appended so far, so it
// must cover the records of those sealed segments too.
func TestSyncCoversSealedSegments(t *testing.T) {
	var mu sync.Mutex
	synced := map[string]int{}
	opts := Options{SegmentBytes: 4096}
	opts.datasync = func(f *os.File) error {
		mu.Lock()
		synced[f.Name()]++
		mu.Unlock()
		return mmapfile.Datasync(f)
	}
	dir := t.TempDir()
	l := mustOpen(t, dir, opts)
	appendN(t, l, 100, func(uint64) int { return 200 })
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range logFiles(t, dir) {
		if synced[segPath(dir, f.base, ".log")] == 0 {
			t.Errorf("Sync returned, Durable %d, but %s was never synced", l.Durable(), segPath(dir, f.base, ".log")[len(dir)+1:])
		}
	}
}

// TestWaitDurableAfterClose: a closed log cannot sync, so WaitDurable must
// not report records durable that no sync covered.
func TestWaitDurableAfterClose(t *testing.T) {
	var syncs atomic.Int64
	opts := Options{}
	opts.datasync = func(f *os.File) error { syncs.Add(1); return mmapfile.Datasync(f) }
	l, err := Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3, mixedSize)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitDurable(context.Background(), 2); err == nil {
		t.Fatalf("WaitDurable after Close returned nil (Durable %d) with %d syncs run", l.Durable(), syncs.Load())
	}
}

func TestLocking(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 8192})
	sizes := appendN(t, w, 100, mixedSize)
	if l, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		if err == nil {
			_ = l.Close()
		}
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	r := mustOpenRO(t, dir, Options{})
	if r.Next() != 100 {
		t.Fatalf("reader sees Next %d, want 100", r.Next())
	}
	more := appendN(t, w, 200, mixedSize) // rolls segments under the reader
	if r.Next() != 300 {
		t.Fatalf("reader's Next is %d, want 300: it follows the writer", r.Next())
	}
	checkAll(t, r, 0, append(sizes, more...))
	if _, err := r.Read(300); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reader Read past the end: %v, want ErrNotFound", err)
	}
	if _, err := r.Append(nil); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Append on a read-only log: %v, want ErrReadOnly", err)
	}
	if _, err := r.AppendWith(nil, &Attrs{HasDue: true}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("AppendWith on a read-only log: %v, want ErrReadOnly", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := mustOpen(t, dir, Options{})
	checkAll(t, w2, 0, append(sizes, more...))
	checkAll(t, r, 0, append(sizes, more...))
}

// spawn runs f on a new goroutine counted by wg.
func spawn(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}
