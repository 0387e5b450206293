package engine

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// Real damage in a segment a log opened read-only reads, when the writer
// cuts the tail inside that segment (Truncate renames a copy of the bytes
// below the cut over the name): the records below the cut are still the
// log's, so the damaged one reads as damaged (ErrCorrupt), not as
// dropped, and Verify reports it.
func TestReadOnlyDamageBesideTruncateCopy(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
	fillGenerationSegments(t, w, 4)
	r := mustOpenRO(t, dir, Options{})
	s := (*r.segs.Load())[1]
	bad, cut := s.Base()+2, s.Base()+6
	if cut >= s.Next() {
		t.Fatalf("segment [%d, %d) too short", s.Base(), s.Next())
	}
	// A flipped byte in the record's body, seen by every mapping.
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, generationBody(bad, 0))
	if i < 0 {
		t.Fatalf("the body of record %d is not in %s", bad, s.Path())
	}
	f, err := os.OpenFile(s.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[i+20] ^ 0xff}, int64(i+20)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := w.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(bad); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTrimmed) {
		t.Fatalf("Read(%d), damaged, after a cut above it: %v; want ErrCorrupt", bad, err)
	}
	rec, err := r.Read(bad + 1)
	if err != nil {
		t.Fatalf("Read(%d), below the cut: %v", bad+1, err)
	}
	rec.Release()
	if rep, err := r.Verify(nil); err != nil || rep.Damaged == 0 {
		t.Fatalf("read-only Verify after the cut: %v, %d damaged; want the damaged record reported", err, rep.Damaged)
	}
}
