//go:build unix

package regfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

const atCWD = unix.AT_FDCWD

// openAt opens name relative to dirfd with O_NOFOLLOW, O_NONBLOCK and
// O_CLOEXEC, checks the type on the descriptor and clears O_NONBLOCK.
func openAt(dirfd int, name, path string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := retry(func() (int, error) {
		return unix.Openat(dirfd, name, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(perm.Perm()))
	})
	if err != nil {
		return nil, openError(dirfd, name, path, "a regular file", err)
	}
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, &TypeError{Path: path, Is: Kind(modeOf(uint32(st.Mode))), Want: "a regular file"}
	}
	// F_SETFL changes only the status flags (O_APPEND, O_NONBLOCK, ...):
	// the access mode and O_SYNC/O_DSYNC stay as opened.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flag&unix.O_APPEND); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func openDirAt(dirfd int, name, path string) (*os.File, error) {
	fd, err := retry(func() (int, error) {
		return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, openError(dirfd, name, path, "a directory", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openError turns a failed open into a *TypeError when something other
// than want is at the name (O_NOFOLLOW fails with ELOOP on Linux and
// macOS, EMLINK on FreeBSD; a FIFO without a reader opened for writing
// with ENXIO; a directory opened for writing with EISDIR, a file opened as
// a directory with ENOTDIR), else into an *os.PathError.
func openError(dirfd int, name, path, want string, err error) error {
	if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EEXIST) {
		if m, lerr := lstatAt(dirfd, name, path); lerr == nil {
			if is := Kind(m); is != want {
				return &TypeError{Path: path, Is: is, Want: want}
			}
		}
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

func lstatAt(dirfd int, name, path string) (fs.FileMode, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		return modeOf(uint32(st.Mode)), nil
	}
}

func fstat(fd int, st *unix.Stat_t) error {
	for {
		if err := unix.Fstat(fd, st); err != unix.EINTR {
			return err
		}
	}
}

func retry(open func() (int, error)) (int, error) {
	for {
		fd, err := open()
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// modeOf gives the type bits of a stat mode as an fs.FileMode.
func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	default:
		return fs.ModeDevice
	}
}

// SoleName returns a *TypeError (matching ErrNotRegular) when the opened
// file f has more than one name: a hard link, which O_NOFOLLOW does not
// stop, to a file elsewhere (outside the log's directory, say). A file
// rewritten in place (a cursor's) is checked so: writing it would change
// the file under its other names too.
func SoleName(f *os.File) error {
	var st unix.Stat_t
	if err := fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	if n := uint64(st.Nlink); n > 1 {
		return &TypeError{Path: f.Name(), Is: fmt.Sprintf("a file with %d names (hard links)", n), Want: "a file of its own"}
	}
	return nil
}
