package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// checkRecord reads off from l and compares its body with want.
func checkRecord(t testing.TB, l *Log, off uint64, want []byte) {
	t.Helper()
	r, err := l.Read(off)
	if err != nil {
		t.Fatalf("Read(%d): %v", off, err)
	}
	defer r.Release()
	if !bytes.Equal(r.Body, want) {
		t.Fatalf("Read(%d): body of %d bytes differs from the %d appended", off, len(r.Body), len(want))
	}
}

// waitAsync runs Wait in a goroutine and returns its result channel.
func waitAsync(l *Log, ctx context.Context, off uint64) chan error {
	ch := make(chan error, 1)
	go func() { ch <- l.Wait(ctx, off) }()
	return ch
}

// notYet fails when ch delivers within d.
func notYet(t *testing.T, ch chan error, d time.Duration) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("Wait returned %v before the record existed", err)
	case <-time.After(d):
	}
}

func within(t *testing.T, ch chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("Wait did not return within %v", d)
		return nil
	}
}

func TestWaitWritable(t *testing.T) {
	for _, spin := range []time.Duration{0, 5 * time.Millisecond} {
		l := mustOpen(t, t.TempDir(), Options{WaitSpin: spin})
		ctx := context.Background()
		w := waitAsync(l, ctx, 1)
		if _, err := l.Append([]byte("zero")); err != nil {
			t.Fatal(err)
		}
		notYet(t, w, 20*time.Millisecond)
		if _, err := l.Append([]byte("one")); err != nil {
			t.Fatal(err)
		}
		if err := within(t, w, 5*time.Second); err != nil {
			t.Fatalf("Wait(1) after the append of 1: %v", err)
		}
		if err := l.Wait(ctx, 0); err != nil {
			t.Fatalf("Wait for an existing record: %v", err)
		}
		// A batch wakes too.
		w = waitAsync(l, ctx, 4)
		if _, _, err := l.AppendBatch([][]byte{{2}, {3}, {4}}, nil); err != nil {
			t.Fatal(err)
		}
		if err := within(t, w, 5*time.Second); err != nil {
			t.Fatalf("Wait(4) after a batch: %v", err)
		}
		// The context ends it.
		cctx, cancel := context.WithCancel(ctx)
		w = waitAsync(l, cctx, 100)
		notYet(t, w, 10*time.Millisecond)
		cancel()
		if err := within(t, w, 5*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel: %v, want context.Canceled", err)
		}
		// Close ends it, for every waiter.
		ws := []chan error{waitAsync(l, ctx, 100), waitAsync(l, ctx, 101)}
		notYet(t, ws[0], 10*time.Millisecond)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if err := within(t, w, 5*time.Second); !errors.Is(err, ErrClosed) {
				t.Fatalf("Wait across Close: %v, want ErrClosed", err)
			}
		}
		if err := l.Wait(ctx, 100); !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait on a closed log: %v", err)
		}
	}
}

// TestFollowInProcess follows a writer with a read-only log of the same
// process: Next, Read, Records and Wait see records appended after the
// open, across rolls, drops and a reopen of the writer.
func TestFollowInProcess(t *testing.T) {
	for _, spin := range []time.Duration{0, 2 * time.Millisecond} {
		dir := t.TempDir()
		opts := Options{SegmentBytes: 16 << 10}
		w := mustOpen(t, dir, opts)
		appendN(t, w, 3, mixedSize)
		r := mustOpenRO(t, dir, Options{WaitSpin: spin})
		if r.Next() != 3 {
			t.Fatalf("follower Next %d, want 3", r.Next())
		}
		ctx := context.Background()
		next := uint64(3)
		for round := 0; round < 200; round++ {
			ch := waitAsync(r, ctx, next)
			if round%50 == 0 {
				notYet(t, ch, 5*time.Millisecond)
			}
			n := 1 + round%7
			appendN(t, w, n, mixedSize)
			if err := within(t, ch, 10*time.Second); err != nil {
				t.Fatalf("round %d: Wait(%d): %v", round, next, err)
			}
			next += uint64(n)
			if got := r.Next(); got != next {
				t.Fatalf("round %d: follower Next %d, want %d", round, got, next)
			}
			for off := next - uint64(n); off < next; off++ {
				checkRecord(t, r, off, testBody(off, mixedSize(off)))
			}
		}
		if segs := len(*r.segs.Load()); segs < 5 {
			t.Fatalf("the follower has %d segments: the writer did not roll enough", segs)
		}
		count := uint64(0)
		for rec, err := range r.Records(0) {
			if err != nil {
				t.Fatalf("Records: %v", err)
			}
			if !bytes.Equal(rec.Body, testBody(rec.Offset, mixedSize(rec.Offset))) || rec.Offset != count {
				t.Fatalf("Records yielded %d with a wrong body (want offset %d)", rec.Offset, count)
			}
			count++
		}
		if count != next {
			t.Fatalf("Records yielded %d records, want %d", count, next)
		}

		// Drops: the follower lets the dropped segments go.
		if _, err := w.DropBefore(next - 5); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for r.First() != w.First() {
			if time.Now().After(deadline) {
				t.Fatalf("follower First %d, writer %d", r.First(), w.First())
			}
			time.Sleep(10 * time.Millisecond)
			r.Next()
		}
		if _, err := r.Read(0); !errors.Is(err, ErrTrimmed) {
			t.Fatalf("Read of a dropped offset: %v, want ErrTrimmed", err)
		}

		// The writer closes and comes back: the follower goes on.
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		ch := waitAsync(r, ctx, next)
		w = mustOpen(t, dir, opts)
		appendN(t, w, 1, mixedSize)
		if err := within(t, ch, 10*time.Second); err != nil {
			t.Fatalf("Wait across a writer's reopen: %v", err)
		}
		checkRecord(t, r, next, testBody(next, mixedSize(next)))
		_ = w.Close()
		_ = r.Close()
	}
}

// TestFollowTruncate: a cut of the tail replaces the newest file; the
// follower opens the log again and serves what it holds now.
func TestFollowTruncate(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 16 << 10})
	appendN(t, w, 100, mixedSize)
	r := mustOpenRO(t, dir, Options{})
	if r.Next() != 100 {
		t.Fatalf("Next %d", r.Next())
	}
	if err := w.Truncate(90); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append([]byte("after the cut")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		rec, err := r.Read(90)
		if err == nil && string(rec.Body) == "after the cut" {
			rec.Release()
			break
		}
		if err == nil {
			rec.Release()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower still serves the cut record 90 (%v); Next %d", err, r.Next())
		}
		time.Sleep(10 * time.Millisecond)
		r.Next()
	}
	if r.Next() != 91 {
		t.Fatalf("follower Next %d after the cut and one append, want 91", r.Next())
	}
}

// TestNotifyFile: a writer makes log.notify; a damaged one is set up again
// in place; readers work without it.
func TestNotifyFile(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{})
	path := filepath.Join(dir, notifyName)
	st, err := os.Stat(path)
	if err != nil || st.Size() != notifySize {
		t.Fatalf("log.notify: %v, %v", st, err)
	}
	appendN(t, w, 10, mixedSize)
	m := openNotifyView(dir)
	if m == nil {
		t.Fatal("openNotifyView found no usable file")
	}
	gen, end := m.tail()
	id, ok := m.identity()
	s := w.active
	if !ok || id.gen != gen || id.base != s.Base() || id.file != s.FileID() || int64(end) != s.End() {
		t.Fatalf("log.notify says gen %d end %d, identity %+v (%v); the writer's segment %d ends at %d",
			gen, end, id, ok, s.Base(), s.End())
	}
	m.release()
	_ = w.Close()
	// Garbage: readers ignore it, the next writer sets it up again.
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xff}, notifySize), 0o600); err != nil {
		t.Fatal(err)
	}
	if m := openNotifyView(dir); m != nil {
		t.Fatal("a reader used a log.notify of an unknown version")
	}
	r := mustOpenRO(t, dir, Options{})
	w = mustOpen(t, dir, Options{})
	appendN(t, w, 1, mixedSize)
	if r.Next() != 11 {
		t.Fatalf("follower Next %d, want 11", r.Next())
	}
	if m := openNotifyView(dir); m == nil {
		t.Fatal("the writer did not set log.notify up again")
	} else {
		m.release()
	}
	// Short: set up again too.
	_ = w.Close()
	if err := os.WriteFile(path, []byte{1, 2, 3}, 0o600); err != nil {
		t.Fatal(err)
	}
	w = mustOpen(t, dir, Options{})
	if st, err := os.Stat(path); err != nil || st.Size() != notifySize {
		t.Fatalf("log.notify after a short one: %v %v", st, err)
	}
	// Without the file, a follower still follows (by looking at the files).
	_ = w.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w = mustOpen(t, dir, Options{})
	_ = os.Remove(path)
	r2 := mustOpenRO(t, dir, Options{})
	ch := waitAsync(r2, context.Background(), 11)
	appendN(t, w, 1, mixedSize)
	if err := within(t, ch, 10*time.Second); err != nil {
		t.Fatalf("Wait without log.notify: %v", err)
	}
}

// TestFollowBeforeFirstSegment: a follower opened when the log has its
// settings but no segment yet sees the first records.
func TestFollowBeforeFirstSegment(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{FirstOffset: 40})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"00000000000000000040.log", "00000000000000000040.index", "00000000000000000040.timeindex", "log.clean"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	r := mustOpenRO(t, dir, Options{})
	if r.Next() != 40 || r.First() != 40 {
		t.Fatalf("follower of a log without segments: [%d, %d), want [40, 40)", r.First(), r.Next())
	}
	ch := waitAsync(r, context.Background(), 41)
	w = mustOpen(t, dir, Options{})
	for i := 0; i < 2; i++ {
		if _, err := w.Append([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := within(t, ch, 10*time.Second); err != nil {
		t.Fatalf("Wait(41): %v", err)
	}
	checkRecord(t, r, 41, []byte{1})
}
