package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
)

// TestViewEndingInLostOffsetsIsNotFollowed: a cleanly closed log whose
// active file lost its last record, and now holds in its place a whole
// record carrying the offset after it. The marker says the log reached 8,
// so a reader serves [0, 8) with 7 missing; the bytes at the file's end
// are not record 8 (the writer, opened again, cuts them and writes offset
// 8 in a new segment). A reader must not take them when it looks for
// appends: its Next, Inspect and Read must agree, and once the writer
// appends, the reader must serve the writer's record 8, not the stale one.
func TestViewEndingInLostOffsetsIsNotFollowed(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	var pos int64
	for i := range 8 {
		if i == 7 {
			pos = l.active.End()
		}
		if _, err := l.Append(fmt.Appendf(nil, "record %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := segPath(dir, 0, segment.LogSuffix)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	stale := record.Append(bytes.Clone(data[:pos]), 8, nil, []byte("stale bytes"))
	if err := os.WriteFile(path, stale, 0o600); err != nil {
		t.Fatal(err)
	}

	ro := mustOpenRO(t, dir, Options{})
	defer ro.Close()
	check := func(when string, next uint64) {
		t.Helper()
		if got := ro.Next(); got != next {
			t.Fatalf("%s: reader's Next %d, want %d", when, got, next)
		}
		n := uint64(0)
		for in := range ro.Inspect(0) {
			if in.Missing > 0 {
				n += in.Missing
				continue
			}
			n++
		}
		if n != next {
			t.Fatalf("%s: Inspect covers %d offsets, Next is %d", when, n, next)
		}
		if r, err := ro.Read(7); !errors.Is(err, ErrCorrupt) {
			r.Release()
			t.Fatalf("%s: Read(7) of a lost offset: %v, want ErrCorrupt", when, err)
		}
	}
	check("opened", 8)
	check("looked again", 8)
	if r, err := ro.Read(8); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read(8) before the writer appended it: %q, %v, want ErrNotFound", r.Body, err)
	}

	w := mustOpen(t, dir, Options{})
	defer w.Close()
	if off, err := w.Append([]byte("the writer's record 8")); err != nil || off != 8 {
		t.Fatalf("Append after the lost offset: %d, %v", off, err)
	}
	deadline := time.Now().Add(time.Minute)
	for ro.Next() < 9 {
		if time.Now().After(deadline) {
			t.Fatalf("the reader never saw the writer's record 8 (Next %d)", ro.Next())
		}
		time.Sleep(time.Millisecond)
	}
	r, err := ro.Read(8)
	if err != nil || string(r.Body) != "the writer's record 8" {
		t.Fatalf("reader's Read(8): %q, %v", r.Body, err)
	}
	r.Release()
	check("after the writer's append", 9)
}
