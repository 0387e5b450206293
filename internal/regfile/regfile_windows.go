package regfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Windows is not supported yet (engine.Open refuses first): every open
// fails there with an error matching errors.ErrUnsupported.

var errWindows = fmt.Errorf("regfile: Windows is not supported yet: %w", errors.ErrUnsupported)

const atCWD = -1

func openAt(dirfd int, name, path string, flag int, perm fs.FileMode) (*os.File, error) {
	return nil, &os.PathError{Op: "open", Path: path, Err: errWindows}
}

func openDirAt(dirfd int, name, path string) (*os.File, error) {
	return nil, &os.PathError{Op: "open", Path: path, Err: errWindows}
}

func lstatAt(dirfd int, name, path string) (fs.FileMode, error) {
	return 0, &os.PathError{Op: "lstat", Path: path, Err: errWindows}
}

// SoleName cannot tell links apart here.
func SoleName(f *os.File) error { return errWindows }
