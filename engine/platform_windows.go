package engine

import (
	"errors"
	"fmt"
	"os"
)

// Windows is not supported yet: Open, OpenReadOnly, OpenCursor and
// Recover fail with an error matching errors.ErrUnsupported before they
// touch the directory. A port needs more than these functions: a file
// that is mapped cannot be removed, renamed over or truncated there, so
// dropping, recycling and truncating segments must wait for the last
// mapping. The rest of this file only keeps the package building.

const lockName = "LOCK"

var errWindows = fmt.Errorf("pagelog: Windows is not supported yet: %w", errors.ErrUnsupported)

// Supported returns an error matching errors.ErrUnsupported: pagelog does
// not run on Windows yet.
func Supported() error { return errWindows }

var errWouldBlock = errors.New("pagelog: lock held")

func lockDir(dir string, mode os.FileMode) (*os.File, error) { return nil, errWindows }
func unlockAndClose(f *os.File) error                        { return f.Close() }
func flockNB(f *os.File) error                               { return errWindows }
func fileKey(st os.FileInfo) [2]uint64                       { return [2]uint64{} }
func dirIdentity(dir string) [4]int64                        { return [4]int64{} }
