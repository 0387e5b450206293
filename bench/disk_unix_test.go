//go:build unix

package bench

import (
	"io/fs"
	"syscall"
)

// allocatedBytes returns the disk blocks a file takes, in bytes (its size
// where the system does not say).
func allocatedBytes(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}
