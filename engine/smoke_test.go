package engine

import (
	"bytes"
	"fmt"
	"testing"
)

func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		off, err := l.Append([]byte(fmt.Sprintf("message %d", i)))
		if err != nil || off != uint64(i) {
			t.Fatal(off, err)
		}
	}
	for i := 0; i < 1000; i++ {
		r, err := l.Read(uint64(i))
		if err != nil || !bytes.Equal(r.Body, []byte(fmt.Sprintf("message %d", i))) {
			t.Fatal(i, err, string(r.Body))
		}
		r.Release()
	}
	n := 0
	for r, err := range l.Records(0) {
		if err != nil || r.Offset != uint64(n) {
			t.Fatal(err, r.Offset)
		}
		n++
	}
	if n != 1000 {
		t.Fatal(n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", l.Recovery())
	if l.Next() != 1000 {
		t.Fatal(l.Next())
	}
	off, err := l.Append([]byte("after"))
	if off != 1000 || err != nil {
		t.Fatal(off, err)
	}
	for i := 0; i < 1001; i++ {
		r, err := l.Read(uint64(i))
		if err != nil {
			t.Fatal(i, err)
		}
		r.Release()
	}
	l.Close()
}

func TestSmokeVerify(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5000; i++ {
		if _, err := l.Append(bytes.Repeat([]byte{byte(i)}, i%300)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := l.Verify(nil)
	if err != nil || !rep.Healthy() || rep.Records != 5000 {
		t.Fatalf("%+v %v", rep, err)
	}
	l.Close()
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = ro.Verify(nil)
	if err != nil || !rep.Healthy() || rep.Records != 5000 {
		t.Fatalf("%+v %v", rep, err)
	}
	n := 0
	for ri := range ro.Inspect(4990) {
		if !ri.OK || ri.Size < 16 {
			t.Fatal(ri)
		}
		n++
	}
	if n != 10 {
		t.Fatal(n)
	}
	ro.Close()
}

func TestSmokeDropBefore(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 200; i++ {
		if _, err := l.Append(bytes.Repeat([]byte{1}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	held, err := l.Read(5)
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.DropBefore(100)
	if err != nil || n == 0 {
		t.Fatal(n, err)
	}
	if l.First() > 100 || l.First() == 0 {
		t.Fatal(l.First())
	}
	if _, err := l.Read(5); err == nil {
		t.Fatal("read of a dropped offset succeeded")
	}
	if !bytes.Equal(held.Body, bytes.Repeat([]byte{1}, 100)) {
		t.Fatal("held record changed")
	}
	held.Release()
	for i := l.First(); i < 200; i++ {
		r, err := l.Read(i)
		if err != nil {
			t.Fatal(i, err)
		}
		r.Release()
	}
}
