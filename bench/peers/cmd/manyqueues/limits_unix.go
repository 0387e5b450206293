//go:build unix

package main

import (
	"io/fs"
	"path/filepath"
	"syscall"
)

// raiseNoFile sets the soft limit on descriptors to the hard one, or to
// limit when that is lower (0: no such cap), and returns both limits as
// they are then.
func raiseNoFile(limit uint64) (soft, hard uint64) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, 0
	}
	want := uint64(r.Max)
	if limit > 0 && limit < want {
		want = limit
	}
	if uint64(r.Cur) != want {
		setLimit(&r.Cur, want)
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r) // best effort: the row shows the limit in force
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r)
	}
	return uint64(r.Cur), uint64(r.Max)
}

// diskUsage is what du reports for dir: the blocks allocated to every file
// under it, in bytes, and the number of files.
func diskUsage(dir string) (bytes int64, files int, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			bytes += int64(st.Blocks) * 512
		}
		if !d.IsDir() {
			files++
		}
		return nil
	})
	return bytes, files, err
}

// setLimit sets a field of syscall.Rlimit, whose type differs between
// systems (uint64 on Linux and Darwin, int64 on FreeBSD).
func setLimit[T int64 | uint64](f *T, v uint64) { *f = T(v) }
