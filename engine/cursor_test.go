package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/checkpoint"
)

func mustCursor(t *testing.T, dir, name string, o CursorOptions) *Cursor {
	t.Helper()
	c, err := OpenCursor(dir, name, o)
	if err != nil {
		t.Fatalf("OpenCursor(%s): %v", name, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// nextWant calls Next and checks the record against testBody.
func nextWant(t *testing.T, c *Cursor, off uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("Next (want %d): %v", off, err)
	}
	defer rec.Release()
	if rec.Offset != off || !bytes.Equal(rec.Body, testBody(off, mixedSize(off))) {
		t.Fatalf("Next returned offset %d (want %d) or a wrong body", rec.Offset, off)
	}
	if c.Position() != off+1 {
		t.Fatalf("Position %d after reading %d", c.Position(), off)
	}
}

func TestCursorResume(t *testing.T) {
	for _, sync := range []SyncPolicy{SyncNone, SyncAlways, SyncInterval} {
		dir := t.TempDir()
		w := mustOpen(t, dir, Options{SegmentBytes: 16 << 10})
		appendN(t, w, 20, mixedSize)
		o := CursorOptions{Sync: sync, SyncInterval: 5 * time.Millisecond}
		c := mustCursor(t, dir, "billing", o)
		if c.Position() != 0 {
			t.Fatalf("a new cursor starts at %d, want 0", c.Position())
		}
		for off := uint64(0); off < 10; off++ {
			nextWant(t, c, off)
		}
		if err := c.Commit(); err != nil {
			t.Fatal(err)
		}
		nextWant(t, c, 10) // read, not committed: comes again
		if _, err := OpenCursor(dir, "billing", o); !errors.Is(err, ErrLocked) {
			t.Fatalf("second OpenCursor of the same name: %v, want ErrLocked", err)
		}
		other := mustCursor(t, dir, "audit", o) // another name is free
		nextWant(t, other, 0)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("second Close: %v", err)
		}
		c = mustCursor(t, dir, "billing", o)
		if c.Position() != 10 {
			t.Fatalf("reopened at %d, want the committed 10", c.Position())
		}
		// Next waits for records appended later, across rolls.
		for off := uint64(10); off < 60; off++ {
			if off >= 20 {
				go func(off uint64) { _, _ = w.Append(testBody(off, mixedSize(off))) }(off)
			}
			nextWant(t, c, off)
		}
		if err := c.Commit(); err != nil {
			t.Fatal(err)
		}
		infos, err := Cursors(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 2 || infos[0].Name != "audit" || infos[1].Name != "billing" {
			t.Fatalf("Cursors: %+v", infos)
		}
		if infos[1].Position != 60 || infos[1].Lag != 0 || infos[1].Committed.IsZero() || infos[1].Damaged != "" {
			t.Fatalf("billing: %+v, want position 60, lag 0", infos[1])
		}
		if infos[0].Position != 0 || infos[0].Lag != 60 {
			t.Fatalf("audit: %+v, want position 0 (never committed), lag 60", infos[0])
		}
		// Seek.
		if err := c.Seek(3); err != nil {
			t.Fatal(err)
		}
		nextWant(t, c, 3)
		if err := c.Seek(61); !errors.Is(err, ErrNotFound) || c.Position() != 4 {
			t.Fatalf("Seek past the end: %v, position %d", err, c.Position())
		}
		_ = w.Close()
	}
}

func TestCursorFromEndAndClose(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{})
	appendN(t, w, 5, mixedSize)
	c := mustCursor(t, dir, "tail", CursorOptions{FromEnd: true})
	if c.Position() != 5 {
		t.Fatalf("FromEnd cursor at %d, want 5", c.Position())
	}
	_ = c.Close()
	appendN(t, w, 2, mixedSize)
	// The start was committed: a reopen skips nothing appended meanwhile.
	c = mustCursor(t, dir, "tail", CursorOptions{FromEnd: true})
	nextWant(t, c, 5)
	nextWant(t, c, 6)
	done := make(chan error, 1)
	go func() {
		_, err := c.Next(context.Background())
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Next across Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not end a waiting Next")
	}
	if _, err := c.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := c.Commit(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v", err)
	}
}

// TestCursorDropped: a position dropped by DropBefore gives one error
// matching ErrNotFound with the count lost, then the first record left.
func TestCursorDropped(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 8 << 10})
	appendN(t, w, 200, mixedSize)
	c := mustCursor(t, dir, "slow", CursorOptions{})
	nextWant(t, c, 0)
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if n, err := w.DropBefore(150); err != nil || n == 0 {
		t.Fatalf("DropBefore: %d, %v", n, err)
	}
	first := w.First()
	c = mustCursor(t, dir, "slow", CursorOptions{})
	_, err := c.Next(context.Background())
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrTrimmed) {
		t.Fatalf("Next at a dropped position: %v, want ErrTrimmed", err)
	}
	if want := "records lost"; !strings.Contains(err.Error(), want) {
		t.Fatalf("the error does not say how many were lost: %v", err)
	}
	nextWant(t, c, first)
	// Dropped while the cursor is open.
	if _, err := w.DropBefore(w.Next()); err != nil {
		t.Fatal(err)
	}
	appendN(t, w, 1, mixedSize)
	if err := c.Seek(first + 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.Next(context.Background())
		if errors.Is(err, ErrTrimmed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower never noticed the drop")
		}
		if err := c.Seek(first + 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.Position() != w.First() {
		t.Fatalf("after the drop the cursor is at %d, want the first record %d", c.Position(), w.First())
	}
}

func TestCursorFiles(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{})
	appendN(t, w, 30, mixedSize)
	c := mustCursor(t, dir, "a", CursorOptions{})
	for off := uint64(0); off < 7; off++ {
		nextWant(t, c, off)
		if err := c.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close()
	path := filepath.Join(dir, cursorDir, "a")
	b, err := os.ReadFile(path)
	if err != nil || len(b) != cursorIDEnd {
		t.Fatalf("position file: %d bytes, %v", len(b), err)
	}
	// A torn newest slot: the one before it is the position.
	newest := int(8%2) * cursorSlotSize // 8 commits: the start, then 7
	damaged := bytes.Clone(b)
	damaged[newest+14] ^= 1
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	c = mustCursor(t, dir, "a", CursorOptions{})
	if c.Position() != 6 || len(c.Notes()) != 0 {
		t.Fatalf("torn newest slot: position %d (want 6), notes %v", c.Position(), c.Notes())
	}
	_ = c.Close()
	// Both slots damaged: never trusted, starts at the first record, says so.
	for i := range damaged {
		damaged[i] = 0x5a
	}
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	infos, err := Cursors(dir)
	if err != nil || len(infos) != 1 || infos[0].Damaged == "" {
		t.Fatalf("Cursors on a damaged file: %+v, %v", infos, err)
	}
	c = mustCursor(t, dir, "a", CursorOptions{})
	if c.Position() != 0 || len(c.Notes()) != 1 {
		t.Fatalf("damaged file: position %d, notes %v", c.Position(), c.Notes())
	}
	_ = c.Close()
	// A short file: the same.
	if err := os.WriteFile(path, []byte{1, 2, 3}, 0o600); err != nil {
		t.Fatal(err)
	}
	c = mustCursor(t, dir, "a", CursorOptions{})
	if c.Position() != 0 || len(c.Notes()) != 1 {
		t.Fatalf("short file: position %d, notes %v", c.Position(), c.Notes())
	}
	_ = c.Close()
	// A newer version's file is refused, never overwritten.
	var slot [cursorSlotSize]byte
	encodeSlot(slot[:], 1, 5, 0)
	slot[0] = 2
	copy(slot[28:], []byte{0, 0, 0, 0})
	fixed := append(slot[:28:28], 0, 0, 0, 0)
	sum := checksumOf(fixed[:28])
	fixed[28], fixed[29], fixed[30], fixed[31] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
	if err := os.WriteFile(path, append(fixed, make([]byte, cursorSlotSize)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCursor(dir, "a", CursorOptions{}); !errors.Is(err, ErrBadFile) {
		t.Fatalf("a newer version's file: %v, want ErrBadFile", err)
	}
	// Names.
	for _, name := range []string{"", ".hidden", "a/b", "..", "x y", strings.Repeat("n", 101)} {
		if _, err := OpenCursor(dir, name, CursorOptions{}); !errors.Is(err, ErrBadCursorName) {
			t.Fatalf("OpenCursor(%q): %v, want ErrBadCursorName", name, err)
		}
	}
	if _, err := OpenCursor(t.TempDir(), "a", CursorOptions{}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("OpenCursor without a log: %v, want ErrNoLog", err)
	}
}

func checksumOf(b []byte) uint32 { return checkpoint.Sum(b) }
