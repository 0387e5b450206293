package record

import (
	"fmt"
	"testing"
)

var benchSizes = []int{64, 1 << 10, 64 << 10}

func sizeName(n int) string {
	switch {
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("body=%dKiB", n>>10)
	default:
		return fmt.Sprintf("body=%dB", n)
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			body := make([]byte, n)
			dst := make([]byte, Size(n, nil))
			b.SetBytes(int64(len(dst)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := Encode(dst, uint64(i), nil, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			rec := Append(nil, 1, nil, make([]byte, n))
			max := MaxLength(n)
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := Decode(rec, max); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeAttrs measures the extra cost of a full attributes section.
func BenchmarkDecodeAttrs(b *testing.B) {
	a := &Attrs{
		HasDue: true, Group: make([]byte, 16), Dedup: make([]byte, 36),
		HasOrigin: true, HasReceives: true, HasMoved: true,
	}
	rec := Append(nil, 1, a, make([]byte, 64))
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := Decode(rec, 0); err != nil {
			b.Fatal(err)
		}
	}
}
