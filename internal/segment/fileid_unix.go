//go:build unix

package segment

import (
	"os"
	"syscall"
)

// fileIdentity names a file by device and inode, so that a view can tell
// its file from one renamed over it.
func fileIdentity(st os.FileInfo) [2]uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(sys.Dev), uint64(sys.Ino)}
	}
	return [2]uint64{}
}
