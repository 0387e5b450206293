// Package regfile opens the files of a log and of a queue: regular files
// only, never through a symbolic link, never blocking.
//
// Someone who may write into a log's directory (a group-writable one, say)
// can put anything under a name the log uses: a FIFO, whose open blocks
// until a writer comes (every open of the log, and every command of the
// CLI, would hang), or a symbolic link to a file outside the directory,
// which a process running as another user would then write through. Every
// open here passes O_NOFOLLOW (a symbolic link in the last component is
// refused, not followed), O_NONBLOCK (a FIFO or a device opens at once)
// and O_CLOEXEC; the type is then checked on the opened descriptor (fstat,
// so that nothing can be swapped in between), and anything but a regular
// file is closed and refused with a *TypeError naming the path. O_NONBLOCK
// is cleared again before the file is returned.
//
// Files that must be new are created with O_EXCL (Create), and files
// replaced by a rename are written under a temporary name that is removed
// first and then created with O_EXCL (WriteNew), so that a symbolic link
// planted at the temporary name is never written through either.
//
// Directories inside a log's directory (cursors/) are opened with
// O_DIRECTORY and O_NOFOLLOW (OpenDir) and the files in them through the
// opened directory (OpenIn), so that a symbolic link put in place of the
// directory is refused too. The log's own directory is the caller's: its
// path is followed as given.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is matched by every *TypeError.
var ErrNotRegular = errors.New("pagelog: not a regular file")

// TypeError reports a path that holds another kind of file than the one
// the log keeps there.
type TypeError struct {
	Path string // the path as opened
	Is   string // what it is: "a symbolic link", "a FIFO", "a directory", ...
	Want string // "a regular file" or "a directory"
}

func (e *TypeError) Error() string {
	return e.Path + " is " + e.Is + ", not " + e.Want
}

func (e *TypeError) Unwrap() error { return ErrNotRegular }

// Kind names the type of a file mode, for an error: "a FIFO", ...
func Kind(m fs.FileMode) string {
	switch t := m.Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeDevice != 0:
		return "a device"
	default:
		return "not a regular file (" + t.String() + ")"
	}
}

// Open opens path as os.OpenFile does, refusing anything but a regular
// file (a *TypeError) and never following a symbolic link in its last
// component.
func Open(path string, flag int, perm fs.FileMode) (*os.File, error) {
	return openAt(atCWD, path, path, flag, perm)
}

// Create creates path, which must not exist (O_EXCL): a symbolic link or
// any other file there is an error.
func Create(path string, flag int, perm fs.FileMode) (*os.File, error) {
	return Open(path, flag|os.O_CREATE|os.O_EXCL, perm)
}

// ErrTooLarge is matched by every *SizeError.
var ErrTooLarge = errors.New("pagelog: file larger than it can be")

// SizeError reports a file larger than ReadFileMax reads.
type SizeError struct {
	Path string
	Size int64 // its size when opened
	Max  int64
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("%s is %d bytes, more than the %d it can hold", e.Path, e.Size, e.Max)
}

func (e *SizeError) Unwrap() error { return ErrTooLarge }

// ReadFile reads the whole regular file at path, as os.ReadFile does.
func ReadFile(path string) ([]byte, error) {
	return ReadFileMax(path, -1)
}

// ReadFileMax reads the regular file at path as ReadFile does, but never
// more than max bytes (no bound when max is negative): a larger file (one
// grown huge, or a sparse one put in its place) gives a *SizeError, and
// never costs more memory than max.
func ReadFileMax(path string, max int64) ([]byte, error) {
	f, err := Open(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if max >= 0 && st.Size() > max {
		return nil, &SizeError{Path: path, Size: st.Size(), Max: max}
	}
	var r io.Reader = f
	if max >= 0 {
		// The file may grow after the Stat: read one byte past max to see it.
		r = io.LimitReader(f, max+1)
	}
	b := make([]byte, 0, st.Size()+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if max >= 0 && int64(len(b)) > max {
			return nil, &SizeError{Path: path, Size: int64(len(b)), Max: max}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// WriteNew writes data to path, which is removed first if it exists (a
// stale temporary file, or whatever was planted there: a symbolic link is
// removed, never followed), then created with O_EXCL and synced when sync
// is set. It is the first half of a replacement by rename.
func WriteNew(path string, data []byte, perm fs.FileMode, sync bool) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := Create(path, os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// OpenDir opens the directory at path read-only, refusing anything else (a
// symbolic link to a directory included) with a *TypeError.
func OpenDir(path string) (*os.File, error) {
	return openDirAt(atCWD, path, path)
}

// OpenIn opens name in the directory dir (from OpenDir) as Open does; the
// errors name dir's path joined with name.
func OpenIn(dir *os.File, name string, flag int, perm fs.FileMode) (*os.File, error) {
	return openAt(int(dir.Fd()), name, dir.Name()+string(os.PathSeparator)+name, flag, perm)
}

// LstatIn returns what name in dir is, without following a symbolic link.
func LstatIn(dir *os.File, name string) (fs.FileMode, error) {
	return lstatAt(int(dir.Fd()), name, dir.Name()+string(os.PathSeparator)+name)
}
