package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Truncate at the moments where it meets other work: a read or Verify
// while its copy is synced, iterators after a failed copy, the recovery
// point, a follower that never waits, an appender waiting for a sync.
// The comment on each test says what it proves and what went wrong
// without the fix it guards (truncate.go, sync.go, view.go).

// A sealed segment opened at Open (lazy, no descriptor), evicted, and cut
// (inside it, or at the base of the next one): a Read below the cut after
// the copy was renamed over its file finds its record (it got ErrNotFound).
func TestTruncateReadDuringCopyOfReopenedSegment(t *testing.T) {
	for _, atBase := range []bool{false, true} {
		t.Run(fmt.Sprint("atBase=", atBase), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1}
			l := mustOpen(t, dir, opts)
			w := &truncGenWriter{l: l}
			w.add(t, 200)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			var h truncSyncHook
			opts.datasync = h.datasync
			w.l = mustOpen(t, dir, opts)
			truncReadDuringCopy(t, w, &h, atBase)
		})
	}
}

// Verify run while the copy of the cut segment is synced calls the log
// healthy (it reported problems: the segment's index files were removed
// while it stayed in the list).
func TestTruncateVerifyDuringCopyIsHealthy(t *testing.T) {
	for _, where := range []string{"active", "sealed"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			var h truncSyncHook
			opts := Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 256}
			opts.datasync = h.datasync
			l := mustOpen(t, dir, opts)
			w := &truncGenWriter{l: l}
			w.add(t, 600)
			awaitBackgroundSeal(l)
			segs := *l.segs.Load()
			cut := l.Next() - 5
			if where == "sealed" {
				cut = segs[0].Base() + 100
			}
			var rep VerifyReport
			var verr error
			verified := false
			h.set(func(f *os.File) error {
				if strings.HasSuffix(f.Name(), ".tmp") {
					verified = true
					rep, verr = l.Verify(nil)
				}
				return nil
			})
			w.truncate(t, cut)
			h.clear()
			if !verified {
				t.Fatalf("Truncate(%d) synced no copy: Verify never ran during it", cut)
			}
			if verr != nil || !rep.Healthy() {
				t.Fatalf("Verify of a healthy log while Truncate(%d) syncs its copy: %v; problems %q; index problems %q", cut, verr, rep.Problems, rep.IndexProblems)
			}
		})
	}
}

// After a Truncate whose copy failed, Records, Inspect and ReadNext over
// the offsets below the cut of the segment that left the list return (they
// never did).
func TestTruncateIteratorsReturnAfterFailedCopy(t *testing.T) {
	dir := t.TempDir()
	var h truncSyncHook
	opts := Options{SegmentBytes: 4 << 10}
	opts.datasync = h.datasync
	l := mustOpen(t, dir, opts)
	w := &truncGenWriter{l: l}
	w.add(t, 150)
	awaitBackgroundSeal(l)
	segs := *l.segs.Load()
	cut := segs[len(segs)/2].Base() + 4
	h.set(func(f *os.File) error {
		if strings.HasSuffix(f.Name(), ".tmp") {
			return syscall.ENOSPC
		}
		return nil
	})
	if err := l.Truncate(cut); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Truncate: %v", err)
	}
	h.clear()
	from := segs[len(segs)/2-1].Base()
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"Records", func() {
			for range l.Records(from) {
			}
		}},
		{"Inspect", func() {
			for range l.Inspect(from) {
			}
		}},
		{"ReadNext", func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			r, _, err := l.ReadNext(ctx, cut-1)
			if err == nil {
				r.Release()
			}
		}},
	} {
		done := make(chan struct{})
		go func() { c.run(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Errorf("%s over [%d, %d) after a failed Truncate(%d) did not return in 2 s (Next %d, First %d)", c.name, from, cut, cut, l.Next(), l.First())
		}
	}
}

// A Truncate moves the recovery point (log.recovery, the sync state's
// point) down to the cut, and a reopen after a clean Close starts at the
// cut. Left past the cut, the checkpointer wrote it after the Truncate
// removed the file, and a reopen reported the cut offsets lost and started
// after them, leaving a hole that read as ErrCorrupt.
func TestTruncateRecoveryPointStaysBelowCut(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncAlways})
	w := &truncGenWriter{l: l}
	w.add(t, 10)
	w.truncate(t, 5)
	if p := l.sync.recoveryPoint(); p.Next > l.Next() {
		t.Errorf("after Truncate(5): the recovery point says Next %d, position %d", p.Next, p.Pos)
	}
	time.Sleep(checkpointEvery + 300*time.Millisecond) // the checkpointer writes it
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := mustOpen(t, dir, Options{})
	if r.Next() != 5 {
		_, err := r.Read(5)
		t.Fatalf("reopen after Truncate(5) and a clean Close: Next %d (want 5); notes %q; Read(5): %v", r.Next(), r.Recovery().Notes, err)
	}
}

// A read-only log that only reads (never Waits) keeps following when a
// Truncate inside a sealed segment removes the two newest segments, and
// serves the writer's new records. It once took the cut for a drop by
// retention and served the cut records for ever.
func TestTruncateDeepCutKeepsFollower(t *testing.T) {
	dir := t.TempDir()
	wl := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
	w := &truncGenWriter{l: wl}
	w.add(t, 100)
	awaitBackgroundSeal(wl)
	ro := mustOpenRO(t, dir, Options{})
	if ro.Next() != wl.Next() {
		t.Fatal("follower not caught up")
	}
	segs := *wl.segs.Load()
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	cut := segs[len(segs)-3].Base() + 2 // the two newest segments go
	w.truncate(t, cut)
	w.add(t, 5)
	deadline := time.Now().Add(time.Minute)
	for ro.Next() != wl.Next() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ro.Next() != wl.Next() {
		t.Fatalf("the follower holds [%d, %d), the writer [%d, %d) after Truncate(%d)", ro.First(), ro.Next(), wl.First(), wl.Next(), cut)
	}
	if err := truncCheckRange(ro, cut, ro.Next(), w.want); err != nil {
		t.Fatal(err)
	}
}

// An appender under SyncAlways that waits for a sync of its record, cut
// meanwhile by Truncate and appended again at the same offset by another
// appender, gets an error, not a success for a record that is gone.
func TestTruncateWaiterOfCutRecordFails(t *testing.T) {
	dir := t.TempDir()
	var h truncSyncHook
	opts := Options{Sync: SyncAlways}
	opts.datasync = h.datasync
	l := mustOpen(t, dir, opts)
	w := &truncGenWriter{l: l}
	w.add(t, 5)
	entered, gate := make(chan struct{}), make(chan struct{})
	logName := filepath.Base(l.active.Path())
	var armed = true
	h.set(func(f *os.File) error {
		if armed && filepath.Base(f.Name()) == logName {
			armed = false
			close(entered)
			<-gate
		}
		return nil
	})
	// C leads a sync (held in the hook) that covers offset 5.
	cErr := make(chan error, 1)
	go func() { _, err := l.Append([]byte("C")); cErr <- err }()
	<-entered
	// A appends offset 6 and waits behind C's sync.
	type res struct {
		off uint64
		err error
	}
	aRes := make(chan res, 1)
	go func() { off, err := l.Append([]byte("A")); aRes <- res{off, err} }()
	for l.Next() != 7 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)     // A is waiting
	if err := l.Truncate(6); err != nil { // A's record goes
		t.Fatal(err)
	}
	bRes := make(chan res, 1)
	go func() { off, err := l.Append([]byte("B")); bRes <- res{off, err} }() // offset 6 again
	for l.Next() != 7 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(gate)
	a := <-aRes
	b := <-bRes
	<-cErr
	if a.err == nil {
		r, _ := l.Read(a.off)
		t.Errorf("Append of A returned offset %d and no error, but Truncate(6) cut A's record: offset %d holds %q (B's Append: %d, %v)", a.off, a.off, r.Body, b.off, b.err)
		r.Release()
	}
}
