//go:build unix && !linux

package engine

import "os"

// dirIdentity names a directory by device, inode and change time (no birth
// time to be had portably).
func dirIdentity(dir string) [4]int64 {
	st, err := os.Stat(dir)
	if err != nil {
		return [4]int64{}
	}
	k := fileKey(st)
	return [4]int64{int64(k[0]), int64(k[1]), st.ModTime().UnixNano(), 0}
}
