//go:build unix

package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/pagelog/pagelog/internal/regfile"
)

const lockName = "LOCK"

// lockDir takes an exclusive, non-blocking flock on dir/LOCK for as long as
// the store is open. The log has a lock of its own in dir/log; this one
// also covers the store's own files, and the moments when the log is being
// replaced (see Store.reset). It dies with the process.
func lockDir(dir string, mode os.FileMode) (*os.File, error) {
	f, err := regfile.Open(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return nil, fmt.Errorf("raftstore: lock %s: %w", dir, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("raftstore: lock %s: %w", dir, err)
	}
	return f, nil
}

// unlockAndClose drops the flock on f and closes it. The lock belongs to the
// open file description, which a child process forked meanwhile shares
// until it execs: closing only this descriptor could leave the store locked
// for that moment, and a Close followed at once by an Open of the same
// directory would fail with ErrLocked. An explicit unlock releases it for
// every descriptor.
func unlockAndClose(f *os.File) error {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return f.Close()
}
