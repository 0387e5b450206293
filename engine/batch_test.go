package engine

import (
	"bytes"
	"errors"
	"testing"
)

func TestAppendBatch(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 64 << 10, Sync: SyncAlways})
	defer l.Close()
	if _, err := l.Append([]byte("before")); err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	var attrs []*Attrs
	for i := range 200 { // several rolls inside one batch
		bodies = append(bodies, testBody(uint64(i+1), 700))
		var a *Attrs
		if i%3 == 0 {
			a = &Attrs{Group: []byte("g"), Due: int64(i), HasDue: true}
		}
		attrs = append(attrs, a)
	}
	first, n, err := l.AppendBatch(bodies, attrs)
	if err != nil || first != 1 || n != len(bodies) {
		t.Fatalf("AppendBatch = %d, %d, %v; want 1, %d, nil", first, n, err, len(bodies))
	}
	if l.Durable() != first+uint64(n) {
		t.Fatalf("Durable = %d after a SyncAlways batch, want %d", l.Durable(), first+uint64(n))
	}
	for i := range bodies {
		r, err := l.Read(first + uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Body, bodies[i]) {
			t.Fatalf("record %d: wrong body", first+uint64(i))
		}
		a, err := r.Attrs()
		if err != nil {
			t.Fatal(err)
		}
		if (attrs[i] != nil) != a.HasDue || (attrs[i] != nil && a.Due != attrs[i].Due) {
			t.Fatalf("record %d: attrs %+v, want %+v", first+uint64(i), a, attrs[i])
		}
		r.Release()
	}

	// One body too large writes nothing, not even the bodies before it.
	next := l.Next()
	_, n, err = l.AppendBatch([][]byte{[]byte("ok"), make([]byte, l.MaxRecordBytes()+1)}, nil)
	if !errors.Is(err, ErrTooLarge) || n != 0 || l.Next() != next {
		t.Fatalf("oversized batch: n=%d err=%v next %d->%d; want ErrTooLarge, nothing written", n, err, next, l.Next())
	}
	// So does a bad attribute set, or a mismatched attrs slice.
	_, _, err = l.AppendBatch([][]byte{[]byte("a")}, []*Attrs{{Group: make([]byte, 129)}})
	if err == nil || l.Next() != next {
		t.Fatalf("bad attrs: err=%v next %d->%d", err, next, l.Next())
	}
	if _, _, err = l.AppendBatch([][]byte{[]byte("a")}, []*Attrs{nil, nil}); err == nil || l.Next() != next {
		t.Fatalf("mismatched attrs: err=%v", err)
	}
	// An empty batch is a no-op.
	if _, n, err = l.AppendBatch(nil, nil); err != nil || n != 0 || l.Next() != next {
		t.Fatalf("empty batch: n=%d err=%v", n, err)
	}
	l.Close()
	if _, _, err := l.AppendBatch([][]byte{[]byte("x")}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}
