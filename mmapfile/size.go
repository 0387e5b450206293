package mmapfile

import (
	"errors"
	"fmt"
	"math"
)

// ErrAddressSpace: a mapping is larger than this process can address (a
// 32-bit process cannot map a file of 2 GiB or more in one piece).
var ErrAddressSpace = errors.New("mmapfile: larger than this process can map")

// Len converts the size of a file region to map into the int that Map
// takes, or gives an error matching ErrAddressSpace when it does not fit
// (only possible in a 32-bit process). A plain int(n) would wrap there,
// mapping a different size than the file's.
func Len(n int64) (int, error) { return lenWithin(n, math.MaxInt) }

func lenWithin(n, maxInt int64) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("mmapfile: negative size %d", n)
	}
	if n > maxInt {
		return 0, fmt.Errorf("%w: %d bytes (at most %d in one mapping)", ErrAddressSpace, n, maxInt)
	}
	return int(n), nil
}
