package mmapfile

import (
	"fmt"
	"os"
)

var zeroBlock [64 << 10]byte

// writeZeros writes n zero bytes at off with plain writes: the portable
// fallback of Allocate and ZeroRange.
func writeZeros(f *os.File, off, n int64) error {
	for n > 0 {
		c := int64(len(zeroBlock))
		if c > n {
			c = n
		}
		if _, err := f.WriteAt(zeroBlock[:c], off); err != nil {
			return fmt.Errorf("mmapfile: write zeros %s: %w", f.Name(), err)
		}
		off += c
		n -= c
	}
	return nil
}

// allocateByWrite extends f to off+n with zeros where fallocate is not
// supported (tmpfs on old kernels, some network filesystems).
func allocateByWrite(f *os.File, off, n int64) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("mmapfile: stat %s: %w", f.Name(), err)
	}
	if st.Size() > off {
		if st.Size() >= off+n {
			return nil
		}
		n -= st.Size() - off
		off = st.Size()
	}
	return writeZeros(f, off, n)
}
