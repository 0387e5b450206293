//go:build linux

package engine

import "golang.org/x/sys/unix"

// dirIdentity names a directory by device, inode and birth time, so that a
// directory made again in the place of a removed one is told apart even
// when its inode number is reused.
func dirIdentity(dir string) [4]int64 {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return [4]int64{}
	}
	return [4]int64{int64(st.Dev_major)<<32 | int64(st.Dev_minor), int64(st.Ino), st.Btime.Sec, int64(st.Btime.Nsec)}
}
