package engine

import "testing"

// Record.Segment names the segment holding a record, the same for records
// of one segment, and reports false once the record is released.
func TestRecordSegment(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	defer l.Close()
	appendN(t, l, 40, func(uint64) int { return 300 }) // 312-byte records: 13 per segment
	seen := map[uint64]int{}
	for off := uint64(0); off < 40; off++ {
		r, err := l.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		base, ok := r.Segment()
		if !ok || base > off {
			t.Fatalf("offset %d: Segment() = %d, %v", off, base, ok)
		}
		seen[base]++
		r.Release()
		if _, ok := r.Segment(); ok {
			t.Fatalf("offset %d: Segment() reports a segment after Release", off)
		}
	}
	if len(seen) < 3 {
		t.Fatalf("40 records of 312 bytes in 4 KiB segments named %d segments: %v", len(seen), seen)
	}
	for base, n := range seen {
		if n < 2 {
			t.Fatalf("segment %d held %d records: %v", base, n, seen)
		}
	}
	if _, ok := (Record{}).Segment(); ok {
		t.Fatal("a zero Record reports a segment")
	}
}
