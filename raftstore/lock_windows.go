package raftstore

import (
	"os"

	"github.com/pagelog/pagelog/engine"
)

// Windows is not supported yet: Open fails there first, with the
// engine's error matching errors.ErrUnsupported.

func lockDir(dir string, mode os.FileMode) (*os.File, error) { return nil, engine.Supported() }
func unlockAndClose(f *os.File) error                        { return f.Close() }
