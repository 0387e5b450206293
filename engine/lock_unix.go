//go:build unix

package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/pagelog/pagelog/internal/regfile"
	"golang.org/x/sys/unix"
)

const lockName = "LOCK"

// Supported returns nil: pagelog runs on this system. (On Windows it
// returns an error matching errors.ErrUnsupported, and every Open fails
// with it.)
func Supported() error { return nil }

// errWouldBlock is what flockNB returns when another open file holds the
// lock.
var errWouldBlock error = unix.EWOULDBLOCK

// lockDir takes an exclusive, non-blocking flock on dir/LOCK. The lock is
// held by the open file and dropped when it is closed (or the process
// dies), so a crash never leaves a stale lock behind.
func lockDir(dir string, mode os.FileMode) (*os.File, error) {
	f, err := regfile.Open(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return nil, fmt.Errorf("pagelog: lock %s: %w", dir, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("pagelog: lock %s: %w", dir, err)
	}
	return f, nil
}

// unlockAndClose drops the flock on f and closes it. The lock belongs to the
// open file description, which a child process forked meanwhile shares
// until it execs (Go opens every file close-on-exec, but a fork comes
// before the exec): closing only this descriptor could leave the lock
// held for that moment, and a Close followed at once by an Open of the
// same directory failed with ErrLocked while another goroutine started a
// process. An explicit unlock releases it for every descriptor.
func unlockAndClose(f *os.File) error {
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return f.Close()
}

// fileKey names a file by device and inode.
func fileKey(st os.FileInfo) [2]uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(sys.Dev), uint64(sys.Ino)}
	}
	return [2]uint64{}
}

// flockNB takes an exclusive flock on f without waiting.
func flockNB(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
