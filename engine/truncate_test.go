package engine

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func truncBody(off uint64) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%d;", off)), int(off%40)+1)
}

// TestTruncate cuts the tail at many places (inside a segment, at a segment
// base, at the first offset) and checks that what remains reads, that
// appends continue at the cut, and that a reopen sees the same.
func TestTruncate(t *testing.T) {
	for _, cut := range []uint64{0, 1, 57, 100, 263, 299, 300} {
		t.Run(fmt.Sprint("cut=", cut), func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir, Options{SegmentBytes: 2048})
			if err != nil {
				t.Fatal(err)
			}
			for i := uint64(0); i < 300; i++ {
				if _, err := l.Append(truncBody(i)); err != nil {
					t.Fatal(err)
				}
			}
			held, err := l.Read(299)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Truncate(cut); err != nil {
				t.Fatal(err)
			}
			_ = held.Body[0] // a record of the cut tail may still be touched
			held.Release()
			if l.Next() != cut {
				t.Fatalf("Next = %d, want %d", l.Next(), cut)
			}
			if _, err := l.Read(cut); cut < 300 && !errors.Is(err, ErrNotFound) {
				t.Fatalf("Read(%d) after the cut: %v", cut, err)
			}
			off, err := l.Append([]byte("new"))
			if err != nil || off != cut {
				t.Fatalf("append after truncate: %d %v", off, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l, err = Open(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if l.Next() != cut+1 {
				t.Fatalf("after reopen Next = %d, want %d", l.Next(), cut+1)
			}
			for i := uint64(0); i < cut; i++ {
				r, err := l.Read(i)
				if err != nil || !bytes.Equal(r.Body, truncBody(i)) {
					t.Fatalf("Read(%d) = %q, %v", i, r.Body, err)
				}
				r.Release()
			}
			r, err := l.Read(cut)
			if err != nil || string(r.Body) != "new" {
				t.Fatalf("Read(%d) = %q, %v", cut, r.Body, err)
			}
			r.Release()
			if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
				t.Fatalf("verify after truncate: %+v %v", rep, err)
			}
		})
	}
}

func TestTruncateOutsideLog(t *testing.T) {
	l, err := Open(t.TempDir(), Options{FirstOffset: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Append([]byte("a"))
	if err := l.Truncate(5); !errors.Is(err, ErrNotFound) {
		t.Fatalf("truncate below First: %v", err)
	}
	if err := l.Truncate(12); !errors.Is(err, ErrNotFound) {
		t.Fatalf("truncate past Next: %v", err)
	}
	if err := l.Truncate(11); err != nil || l.Next() != 11 {
		t.Fatalf("truncate at Next: %v", err)
	}
}
