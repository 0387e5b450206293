package engine

import "testing"

// DropPoint is the lowest offset for which DropBefore removes a segment:
// below it DropBefore removes none, at it the oldest one.
func TestDropPoint(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 64 << 10})
	defer l.Close()
	if p, ok := l.DropPoint(); ok {
		t.Fatalf("DropPoint of a log of one segment: %d, true", p)
	}
	for len(*l.segs.Load()) < 3 {
		if _, err := l.Append(testBody(l.Next(), 1000)); err != nil {
			t.Fatal(err)
		}
	}
	p, ok := l.DropPoint()
	if !ok || p != (*l.segs.Load())[1].Base() {
		t.Fatalf("DropPoint %d, %v; the second segment's base is %d", p, ok, (*l.segs.Load())[1].Base())
	}
	if k, err := l.DropBefore(p - 1); err != nil || k != 0 {
		t.Fatalf("DropBefore(DropPoint-1) removed %d, %v", k, err)
	}
	if k, err := l.DropBefore(p); err != nil || k != 1 {
		t.Fatalf("DropBefore(DropPoint) removed %d, %v", k, err)
	}
	if q, ok := l.DropPoint(); !ok || q <= p || l.First() != p {
		t.Fatalf("after the drop: DropPoint %d, %v, First %d (was %d)", q, ok, l.First(), p)
	}
}
