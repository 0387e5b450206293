package hist

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestQuantiles: quantiles as the benchmarks report them (the sorted
// operations' element at floor(q*n)), the exact maximum, and a file
// written, read back and merged.
func TestQuantiles(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Nanosecond)
	}
	h.Add(12345678 * time.Nanosecond)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.5, 501}, {0.99, 991}, {0.999, 1000}, {1, 12345678}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	path := filepath.Join(t.TempDir(), "h.hist")
	if err := h.WriteFile(path, "test\nsecond line"); err != nil {
		t.Fatal(err)
	}
	r, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r.Merge(&h)
	if r.N() != 2002 || r.Max() != 12345678 || r.Quantile(0.5) != 501 {
		t.Fatalf("merged: n %d max %v p50 %v, want 2002, 12.345678ms, 501ns", r.N(), r.Max(), r.Quantile(0.5))
	}
	if b := r.Buckets(); b[len(b)-1] != (Bucket{12300000, 2}) {
		t.Fatalf("last bucket %+v, want 12300000 x2 (three significant digits)", b[len(b)-1])
	}
}

func TestReadFileRejects(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"empty":    "# nothing\n",
		"count":    "max 10\n10 0\n",
		"negative": "-5 1\n",
		"words":    "ten 1\n",
		"badmax":   "max x\n1 1\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(path); err == nil {
			t.Errorf("%s: read without an error", name)
		}
	}
}
