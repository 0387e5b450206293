package engine

// The promises of the README that need no simulated disk: group commit,
// WaitDurable and cancellation, a failed background sync, a full disk
// while an index file or log.meta is written. (The power-loss promises are
// in promises_power_linux_test.go.)

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/mmapfile"
)

// TestGroupCommitSharesSyncs: 64 appenders under SyncAlways share
// fdatasyncs: far fewer syncs than appends (counted at the hook, which
// stands for a disk whose fdatasync takes 1 ms), every append durable when
// it returns, and Stats().Syncs counting the same rounds.
func TestGroupCommitSharesSyncs(t *testing.T) {
	const appenders, each = 64, 20
	var logSyncs atomic.Int64
	opts := Options{Sync: SyncAlways, SegmentBytes: 8 << 20}
	opts.datasync = func(f *os.File) error {
		if strings.HasSuffix(f.Name(), segment.LogSuffix) {
			logSyncs.Add(1)
		}
		time.Sleep(time.Millisecond)
		return nil
	}
	l := mustOpen(t, crashScratchDir(t), opts)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range appenders {
		spawn(&wg, func() {
			<-start
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
	close(start)
	wg.Wait()
	appends := int64(appenders * each)
	syncs := logSyncs.Load()
	st := l.Stats()
	t.Logf("%d appends by %d appenders: %d fdatasyncs of the log (%.1f appends per sync), Stats().Syncs %d, last batch %d",
		appends, appenders, syncs, float64(appends)/float64(syncs), st.Syncs, st.LastSyncBatch)
	switch {
	case l.Durable() != uint64(appends):
		t.Fatalf("Durable %d, want %d", l.Durable(), appends)
	case syncs == 0 || syncs*8 > appends:
		t.Fatalf("%d fdatasyncs for %d appends: group commit should need far fewer (at most one per 8 appends here)", syncs, appends)
	case st.Syncs != uint64(syncs):
		t.Fatalf("Stats().Syncs = %d, but the hook saw %d syncs of the log", st.Syncs, syncs)
	}
}

// TestWaitDurableCancelled: WaitDurable returns ctx.Err() once its context
// ends, while a sync it waits behind is stuck, and whether the context
// was cancelled or timed out; the sync, once it ends, makes the record
// durable for the next caller.
func TestWaitDurableCancelled(t *testing.T) {
	var (
		mu      sync.Mutex
		blocked = make(chan struct{})
		release = make(chan struct{})
		first   = true
	)
	opts := Options{}
	opts.datasync = func(f *os.File) error {
		mu.Lock()
		block := first
		first = false
		mu.Unlock()
		if block {
			close(blocked)
			<-release
		}
		return nil
	}
	l := mustOpen(t, t.TempDir(), opts)
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before Close (cleanups run last first), even on failure
	appendN(t, l, 10, mixedSize)
	syncDone := make(chan error, 1)
	go func() { syncDone <- l.Sync() }() // runs the sync, stuck in fdatasync
	<-blocked
	off, err := l.Append([]byte("after the stuck sync began"))
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		for _, target := range []uint64{5, off} { // covered by the stuck sync, and past it
			ctx, cancel := c.ctx()
			done := make(chan error, 1)
			go func() { done <- l.WaitDurable(ctx, target) }()
			if c.want == context.Canceled {
				cancel()
			}
			select {
			case err := <-done:
				if !errors.Is(err, c.want) {
					t.Errorf("%s: WaitDurable(%d) behind a stuck sync: %v, want %v", c.name, target, err, c.want)
				}
			case <-time.After(time.Minute):
				t.Fatalf("%s: WaitDurable(%d) behind a stuck sync did not return a minute after its context ended", c.name, target)
			}
			cancel()
		}
	}
	// An already cancelled context, while the sync is still stuck.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.WaitDurable(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitDurable with a cancelled context behind a stuck sync: %v, want context.Canceled", err)
	}
	if d := l.Durable(); d != 0 {
		t.Fatalf("Durable %d while the only sync is stuck", d)
	}

	unblock()
	if err := <-syncDone; err != nil {
		t.Fatalf("the stuck Sync, released: %v", err)
	}
	if d := l.Durable(); d != off {
		t.Fatalf("Durable %d after the sync covering [0, %d) ended", d, off)
	}
	if err := l.WaitDurable(context.Background(), off); err != nil || l.Durable() != off+1 {
		t.Fatalf("WaitDurable(%d) after the release: %v, Durable %d", off, err, l.Durable())
	}
}

// TestSyncIntervalFailureIsSticky: under SyncInterval, a failed background
// fdatasync makes the log refuse appends with ErrSyncFailed from then on,
// as a failed sync does under SyncAlways, even once fdatasync works again
// (the kernel may have dropped the pages it could not write); nothing is
// reported durable past the failure, no clean-close marker is written, and
// a reopen recovers and appends.
func TestSyncIntervalFailureIsSticky(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	var failed atomic.Int64
	opts := Options{Sync: SyncInterval, SyncInterval: 5 * time.Millisecond}
	opts.datasync = func(f *os.File) error {
		if fail.Load() {
			failed.Add(1)
			return syscall.EIO
		}
		return mmapfile.Datasync(f)
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 20, mixedSize)
	waitFor(t, "the background sync to cover the first records", func() bool { return l.Durable() == 20 })
	fail.Store(true)
	appendN(t, l, 5, mixedSize) // acknowledged at once under SyncInterval
	waitFor(t, "a background sync to fail", func() bool { return l.Stats().SyncErr != nil })
	fail.Store(false) // a retry would succeed: the log must not believe it
	if err := l.Stats().SyncErr; !errors.Is(err, ErrSyncFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Stats().SyncErr = %v, want ErrSyncFailed wrapping EIO", err)
	}
	for i := range 3 {
		if _, err := l.Append([]byte("refused")); !errors.Is(err, ErrSyncFailed) {
			t.Fatalf("Append %d after the background sync failed: %v, want ErrSyncFailed", i, err)
		}
		if _, _, err := l.AppendBatch([][]byte{[]byte("refused")}, nil); !errors.Is(err, ErrSyncFailed) {
			t.Fatalf("AppendBatch after the background sync failed: %v, want ErrSyncFailed", err)
		}
		time.Sleep(3 * opts.SyncInterval) // more background ticks: none may clear it
	}
	if err := l.Sync(); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Sync after the background sync failed: %v, want ErrSyncFailed", err)
	}
	if err := l.WaitDurable(context.Background(), 24); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("WaitDurable(24) after the background sync failed: %v, want ErrSyncFailed", err)
	}
	if d := l.Durable(); d != 20 || l.Next() != 25 {
		t.Fatalf("Durable %d, Next %d after the failure, want 20 and 25", d, l.Next())
	}
	if failed.Load() == 0 {
		t.Fatal("the failing hook was never called")
	}
	for off := uint64(0); off < 25; off++ {
		checkRead(t, l, off, mixedSize(off))
	}
	if err := l.Close(); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Close after a failed sync: %v, want ErrSyncFailed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, cleanName)); err == nil {
		t.Fatal("a log whose sync failed left a clean-close marker")
	}
	l = mustOpen(t, dir, Options{Sync: SyncInterval})
	for off := uint64(0); off < 25; off++ {
		checkRead(t, l, off, mixedSize(off))
	}
	if off, err := l.Append([]byte("again")); err != nil || off != 25 {
		t.Fatalf("Append after the reopen: %d, %v; want 25", off, err)
	}
}

// waitFor polls cond until it holds, for at most a minute (a hang).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// indexFull returns an allocate hook that fails with ENOSPC for index
// files (.index, .timeindex, prepared or named) while full is set.
func indexFull(full *atomic.Bool, refused *atomic.Int64) func(f *os.File, off, n int64) error {
	return func(f *os.File, off, n int64) error {
		name := f.Name()
		if full.Load() && (strings.HasSuffix(name, segment.IndexSuffix) || strings.HasSuffix(name, segment.TimeIndexSuffix)) {
			refused.Add(1)
			return syscall.ENOSPC
		}
		return mmapfile.Allocate(f, off, n)
	}
}

// TestIndexFileENOSPC: a full disk while an index file is allocated (a new
// log, a roll, the segment Truncate starts again) fails the call with an
// error wrapping ENOSPC, loses no acknowledged record, leaves no half-made
// segment behind, and the log goes on once there is space.
func TestIndexFileENOSPC(t *testing.T) {
	const bodyLen = 100
	body := func(off uint64) []byte { return testBody(off, bodyLen) }
	noSegments := func(t *testing.T, dir string, want int) {
		t.Helper()
		// The preparer may be removing the files of a prepared segment
		// whose allocation just failed: wait for it to finish (it fails
		// 8 runs in 60 without the wait), then nothing may be left.
		var entries []os.DirEntry
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			entries, _ = os.ReadDir(dir)
			left := slices.ContainsFunc(entries, func(e os.DirEntry) bool {
				return strings.HasPrefix(e.Name(), segment.PreparedPrefix)
			})
			if !left || time.Now().After(deadline) {
				break
			}
		}
		n := 0
		for _, e := range entries {
			if _, _, ok := segment.ParseName(e.Name()); ok {
				n++
			}
			if strings.HasPrefix(e.Name(), segment.PreparedPrefix) {
				t.Errorf("%s left behind by a failed allocation", e.Name())
			}
		}
		if n != want {
			t.Errorf("%d segment files, want %d", n, want)
		}
	}

	t.Run("new log", func(t *testing.T) {
		dir := t.TempDir()
		var full atomic.Bool
		var refused atomic.Int64
		full.Store(true)
		opts := Options{SegmentBytes: 4096}
		opts.allocate = indexFull(&full, &refused)
		if l, err := Open(dir, opts); !errors.Is(err, syscall.ENOSPC) {
			if err == nil {
				_ = l.Close()
			}
			t.Fatalf("Open of a new log with no space for its index: %v, want an error wrapping ENOSPC", err)
		}
		noSegments(t, dir, 0)
		full.Store(false)
		l := mustOpen(t, dir, opts)
		appendN(t, l, 3, func(uint64) int { return bodyLen })
		if refused.Load() == 0 {
			t.Fatal("the hook refused nothing")
		}
	})

	t.Run("roll", func(t *testing.T) {
		dir := t.TempDir()
		var full atomic.Bool
		var refused atomic.Int64
		opts := Options{SegmentBytes: 4096}
		opts.allocate = indexFull(&full, &refused)
		l := mustOpen(t, dir, opts)
		sizes := appendN(t, l, 60, func(uint64) int { return bodyLen })
		full.Store(true)
		var failed error
		for i := 0; i < 200 && failed == nil; i++ {
			off := l.Next()
			if _, err := l.Append(body(off)); err != nil {
				failed = err
				break
			}
			sizes = append(sizes, headerSize+bodyLen)
		}
		if !errors.Is(failed, syscall.ENOSPC) || !strings.Contains(failed.Error(), "index") {
			t.Fatalf("Append that rolls with no space for the index files: %v, want an error wrapping ENOSPC naming the index", failed)
		}
		stuck := l.Next()
		for range 3 {
			if _, err := l.Append(body(stuck)); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("retried Append: %v, want ENOSPC", err)
			}
		}
		if l.Next() != stuck {
			t.Fatalf("Next moved to %d on failed appends (was %d)", l.Next(), stuck)
		}
		checkAll(t, l, 0, sizes)
		noSegments(t, dir, 3*len(logFiles(t, dir)))
		full.Store(false)
		if off, err := l.Append(body(stuck)); err != nil || off != stuck {
			t.Fatalf("Append once there is space: %d, %v; want %d", off, err, stuck)
		}
		sizes = append(sizes, headerSize+bodyLen)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, dir, Options{})
		checkAll(t, l, 0, sizes)
		if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
			t.Fatalf("Verify: %v %+v", err, rep)
		}
	})

	t.Run("truncate", func(t *testing.T) {
		dir := t.TempDir()
		var full atomic.Bool
		var refused atomic.Int64
		opts := Options{SegmentBytes: 4096, Sync: SyncAlways}
		opts.allocate = indexFull(&full, &refused)
		l, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		sizes := appendN(t, l, 100, func(uint64) int { return bodyLen })
		const cut = 45
		full.Store(true)
		err = l.Truncate(cut)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Truncate with no space for the new index files: %v, want an error wrapping ENOSPC", err)
		}
		if _, err := l.Append(body(cut)); err == nil {
			t.Fatal("Append after a failed Truncate succeeded: the log is in no state to be appended to")
		}
		_ = l.Close()
		full.Store(false)
		l = mustOpen(t, dir, Options{})
		if l.Next() < cut || l.Next() > 100 {
			t.Fatalf("after a failed Truncate(%d) of [0, 100): Next %d", cut, l.Next())
		}
		checkAll(t, l, 0, sizes[:l.Next()])
		if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
			t.Fatalf("Verify: %v %+v", err, rep)
		}
		if off, err := l.Append(body(l.Next())); err != nil || off != l.Next()-1 {
			t.Fatalf("Append after the reopen: %d, %v", off, err)
		}
	})
}

// fillDisk fills the file system that holds dir with a ballast file, page
// by page, until a write fails with ENOSPC; it returns the ballast's path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return path
		}
	}
}

// noTemporaries fails when dir holds a *.tmp file (a replace that failed
// must remove its temporary file).
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("%s left behind", e.Name())
		}
	}
}

// TestMetaENOSPC fills a real (tmpfs) file system: writing log.meta fails
// with a clear error wrapping ENOSPC, for a new log and for a log reopened
// with new settings; the old log.meta stays as it was, no temporary file
// is left, every record reads, and the log opens once there is space.
func TestMetaENOSPC(t *testing.T) {
	fsdir := mountTmpfs(t, "1m")
	dir := filepath.Join(fsdir, "new")
	ballast := fillDisk(t, fsdir)
	if l, err := Open(dir, Options{}); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), metaName) {
		if err == nil {
			_ = l.Close()
		}
		t.Fatalf("Open of a new log on a full disk: %v, want an error wrapping ENOSPC naming %s", err, metaName)
	}
	noTemporaries(t, dir)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}

	dir = filepath.Join(fsdir, "old")
	opts := Options{SegmentBytes: 64 << 10, MaxRecordBytes: 1000}
	l := mustOpen(t, dir, opts)
	sizes := appendN(t, l, 300, func(uint64) int { return 500 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, metaName))
	if err != nil {
		t.Fatal(err)
	}
	ballast = fillDisk(t, fsdir)
	changed := Options{SegmentBytes: 32 << 10}
	if l, err := Open(dir, changed); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), metaName) {
		if err == nil {
			_ = l.Close()
		}
		t.Fatalf("reopen with new settings on a full disk: %v, want an error wrapping ENOSPC naming %s", err, metaName)
	}
	noTemporaries(t, dir)
	if b, err := os.ReadFile(filepath.Join(dir, metaName)); err != nil || !bytes.Equal(b, meta) {
		t.Fatalf("log.meta after the failed rewrite: %x, %v; want it as it was, %x", b, err, meta)
	}
	ro := mustOpenRO(t, dir, Options{})
	checkAll(t, ro, 0, sizes)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, changed)
	checkAll(t, l, 0, sizes)
	if l.meta.SegmentBytes != changed.SegmentBytes {
		t.Fatalf("SegmentBytes %d once there is space, want %d", l.meta.SegmentBytes, changed.SegmentBytes)
	}
}

// TestIndexRewriteENOSPC: when Open trims the segment sealed last (a crash
// during a roll left its index files at their preallocated size) on a full
// file system, the rewrite of its index files fails; the index is a cache:
// Open goes on, every record reads, no temporary file is left, and a later
// open with space finishes the job.
func TestIndexRewriteENOSPC(t *testing.T) {
	fsdir := mountTmpfs(t, "2m")
	dir := filepath.Join(fsdir, "log")
	opts := Options{SegmentBytes: 16 << 10, IndexIntervalBytes: 256}
	l := mustOpen(t, dir, opts)
	sizes := appendN(t, l, 200, func(uint64) int { return 300 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files := logFiles(t, dir)
	if len(files) < 3 {
		t.Fatalf("%d segments, want at least 3", len(files))
	}
	// The sealed segment before the active one, as a crash during its
	// roll may leave it: index files longer than their entries.
	last := files[len(files)-2].base
	idxSize := func() int64 {
		st, err := os.Stat(segPath(dir, last, segment.IndexSuffix))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	trimmed := idxSize()
	for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		f, err := os.OpenFile(segPath(dir, last, suffix), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.Write(make([]byte, 4096))
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Remove(filepath.Join(dir, cleanName))
	ballast := fillDisk(t, fsdir)
	l = mustOpen(t, dir, Options{})
	checkAll(t, l, 0, sizes)
	noTemporaries(t, dir)
	if n := idxSize(); n != trimmed+4096 {
		t.Fatalf("the index file is %d bytes after an open on a full disk, want it left at %d (the rewrite cannot have succeeded)", n, trimmed+4096)
	}
	// Close cannot write its clean-close marker either: it says so.
	if err := l.Close(); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), cleanName) {
		t.Fatalf("Close on a full disk: %v, want an error wrapping ENOSPC naming %s", err, cleanName)
	}
	noTemporaries(t, dir)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{})
	checkAll(t, l, 0, sizes)
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Fatalf("Verify once there is space: %v %+v", err, rep)
	}
	if n := idxSize(); n != trimmed {
		t.Fatalf("the index file is %d bytes after an open with space, want it rewritten to %d", n, trimmed)
	}
}

// WaitDurable that runs the sync itself returns when its context ends, even
// while the fdatasync hangs, and a context already done starts no sync.
func TestWaitDurableLeaderCancelled(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	opts := Options{}
	opts.datasync = func(f *os.File) error {
		calls.Add(1)
		<-release
		return nil
	}
	l := mustOpen(t, t.TempDir(), opts)
	defer func() {
		close(release)
		l.Close()
	}()
	if _, err := l.Append([]byte("x")); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.WaitDurable(done, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitDurable with a done context: %v, want context.Canceled", err)
	}
	if calls.Load() != 0 {
		t.Fatalf("a done context started %d syncs", calls.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- l.WaitDurable(ctx, 0) }()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitDurable cancelled behind its own hung sync: %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("WaitDurable did not return when its context was cancelled while its own sync hung")
	}
}
