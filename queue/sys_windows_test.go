package queue

import (
	"errors"
	"os"
	"time"
)

// Windows is not supported yet: these keep the tests building there.

func mkfifo(path string) error          { return errors.ErrUnsupported }
func inodeNumber(fi os.FileInfo) uint64 { return 0 }
func blocksOf(fi os.FileInfo) int64     { return fi.Size() }
func killSelf()                         { os.Exit(137) }

func unixUmask(m int) int                  { return 0 }
func limitAddressSpace(bytes uint64) error { return errors.ErrUnsupported }
func cpuTime() time.Duration               { return 0 }
