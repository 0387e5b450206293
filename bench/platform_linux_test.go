package bench

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// dieWithParent makes a child process get SIGKILL when the benchmark
// process dies, so no writer outlives a killed run.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// watchWrites returns a function that blocks until path is written to
// (inotify IN_MODIFY).
func watchWrites(path string) (wait func() error, err error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
		return nil, err
	}
	events := make([]byte, 4096)
	return func() error {
		if _, err := unix.Read(fd, events); err != nil && err != unix.EINTR {
			return err
		}
		return nil
	}, nil
}
