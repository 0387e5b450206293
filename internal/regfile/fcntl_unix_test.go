//go:build unix

package regfile

import (
	"os"

	"golang.org/x/sys/unix"
)

func fcntlFlags(f *os.File) (int, error) { return unix.FcntlInt(f.Fd(), unix.F_GETFL, 0) }
