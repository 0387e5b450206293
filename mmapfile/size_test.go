package mmapfile

import (
	"errors"
	"math"
	"testing"
)

// A size past what an int holds (2^31 in a 32-bit process) is an error
// matching ErrAddressSpace, never a wrapped int that would map a
// different size than the file's.
func TestLenRefusesSizesAnIntCannotHold(t *testing.T) {
	if n, err := lenWithin(math.MaxInt32, math.MaxInt32); err != nil || n != math.MaxInt32 {
		t.Errorf("lenWithin(2^31-1) = %d, %v", n, err)
	}
	for _, v := range []int64{math.MaxInt32 + 1, 1 << 32, 1<<32 + 4096, math.MaxInt64} {
		if n, err := lenWithin(v, math.MaxInt32); !errors.Is(err, ErrAddressSpace) {
			t.Errorf("32-bit: lenWithin(%d) = %d, %v; want ErrAddressSpace", v, n, err)
		}
	}
	if _, err := Len(-1); err == nil {
		t.Error("Len(-1): no error")
	}
	if n, err := Len(1 << 20); err != nil || n != 1<<20 {
		t.Errorf("Len(1 MiB) = %d, %v", n, err)
	}
}
