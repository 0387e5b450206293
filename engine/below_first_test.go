package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Reads below a log's first offset: a log made with Options.FirstOffset
// above 0 (every raftstore log is) never held the offsets below it, and a
// log that dropped its front no longer holds them. A reader that asks for
// one is told once, with ErrTrimmed, and goes on at the first record.

// returnsWithin runs f and fails the test when it has not returned after
// 10 seconds (a read that loops without end ignores its context).
func returnsWithin[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return in a minute", what)
		panic("unreachable")
	}
}

type readNextResult struct {
	rec  Record
	next uint64
	err  error
}

// readNextOf calls l.ReadNext(ctx, off) under returnsWithin.
func readNextOf(t *testing.T, l *Log, ctx context.Context, off uint64) readNextResult {
	t.Helper()
	return returnsWithin(t, fmt.Sprintf("ReadNext(%d)", off), func() readNextResult {
		rec, next, err := l.ReadNext(ctx, off)
		return readNextResult{rec, next, err}
	})
}

// wantTrimmed checks a ReadNext below the first record: ErrTrimmed (and
// so ErrNotFound) naming the range skipped and how many records were lost,
// and the first record as next.
func wantTrimmed(t *testing.T, r readNextResult, off, first, lost uint64) {
	t.Helper()
	if !errors.Is(r.err, ErrTrimmed) || !errors.Is(r.err, ErrNotFound) {
		t.Fatalf("ReadNext(%d): %v, want ErrTrimmed", off, r.err)
	}
	if r.next != first {
		t.Fatalf("ReadNext(%d): next %d, want the first record %d", off, r.next, first)
	}
	if r.rec.Offset != off || r.rec.Body != nil {
		t.Fatalf("ReadNext(%d): a record at %d with a body of %d bytes beside the error", off, r.rec.Offset, len(r.rec.Body))
	}
	for _, want := range []string{fmt.Sprintf("[%d, %d)", off, first), fmt.Sprintf(": %d records lost", lost)} {
		if !strings.Contains(r.err.Error(), want) {
			t.Fatalf("ReadNext(%d): %q does not say %q", off, r.err, want)
		}
	}
}

func TestReadNextBelowFirstOffsetIsTrimmed(t *testing.T) {
	const firstOffset = 100
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("readonly=%v", readOnly), func(t *testing.T) {
			dir := t.TempDir()
			w := mustOpen(t, dir, Options{FirstOffset: firstOffset, SegmentBytes: 8 << 10})
			r := w
			if readOnly {
				r = mustOpenRO(t, dir, Options{})
			}
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()

			// An empty log: nothing was lost, and the reader waits at
			// the first offset.
			for _, off := range []uint64{0, firstOffset - 1} {
				wantTrimmed(t, readNextOf(t, r, cancelled, off), off, firstOffset, 0)
			}
			if res := readNextOf(t, r, cancelled, firstOffset); !errors.Is(res.err, context.Canceled) || res.next != firstOffset {
				t.Fatalf("ReadNext(%d) of an empty log with its context ended: next %d, %v", firstOffset, res.next, res.err)
			}

			// Records from the first offset on.
			appendN(t, w, 200, mixedSize)
			res := readNextOf(t, r, cancelled, 7)
			wantTrimmed(t, res, 7, firstOffset, 0)
			got := readNextOf(t, r, cancelled, res.next)
			if got.err != nil || got.rec.Offset != firstOffset || got.next != firstOffset+1 {
				t.Fatalf("ReadNext(%d): offset %d, next %d, %v", firstOffset, got.rec.Offset, got.next, got.err)
			}
			got.rec.Release()

			// The front dropped: the records lost are those the log held,
			// not the offsets below its first that it never held.
			if n, err := w.DropBefore(firstOffset + 150); err != nil || n == 0 {
				t.Fatalf("DropBefore: %d, %v", n, err)
			}
			first := w.First()
			if first == firstOffset {
				t.Fatalf("DropBefore dropped no segment (first %d)", first)
			}
			for deadline := time.Now().Add(time.Minute); r.First() != first; r.Next() {
				// A follower sees the drop when it looks for records.
				if time.Now().After(deadline) {
					t.Fatalf("the reader's first record is %d, the writer's %d", r.First(), first)
				}
			}
			wantTrimmed(t, readNextOf(t, r, cancelled, 3), 3, first, first-firstOffset)
			wantTrimmed(t, readNextOf(t, r, cancelled, firstOffset+1), firstOffset+1, first, first-firstOffset-1)
		})
	}
}

func TestCursorBelowFirstOffsetIsTrimmed(t *testing.T) {
	const firstOffset = 1000
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{FirstOffset: firstOffset})
	appendN(t, w, 3, mixedSize)
	c := mustCursor(t, dir, "c", CursorOptions{})
	if c.Position() != firstOffset {
		t.Fatalf("a new cursor at %d, want the first offset %d", c.Position(), firstOffset)
	}
	next := func() (Record, error) {
		t.Helper()
		type res struct {
			rec Record
			err error
		}
		r := returnsWithin(t, "Cursor.Next", func() res {
			rec, err := c.Next(context.Background())
			return res{rec, err}
		})
		return r.rec, r.err
	}
	// Seek below the first record: the next Next says so, once.
	if err := c.Seek(0); err != nil {
		t.Fatalf("Seek(0): %v", err)
	}
	if _, err := next(); !errors.Is(err, ErrTrimmed) || !strings.Contains(err.Error(), "records lost") {
		t.Fatalf("Next after Seek(0): %v, want ErrTrimmed saying how many records were lost", err)
	}
	if c.Position() != firstOffset {
		t.Fatalf("after the report the cursor is at %d, want %d", c.Position(), firstOffset)
	}
	nextWant(t, c, firstOffset)

	// A position committed below the first record.
	if err := c.Seek(firstOffset - 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	c = mustCursor(t, dir, "c", CursorOptions{})
	if _, err := next(); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("Next at a committed position below the first record: %v, want ErrTrimmed", err)
	}
	nextWant(t, c, firstOffset)
	nextWant(t, c, firstOffset+1)
}
