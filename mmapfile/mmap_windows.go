package mmapfile

import (
	"errors"
	"fmt"
	"os"
)

// Windows is not supported yet: pagelog opens no log there (engine.Open
// refuses first), so these only keep the package building. A port needs
// CreateFileMapping/MapViewOfFile, and must let a mapped file's removal,
// rename and truncation wait for its last mapping.

var errWindows = fmt.Errorf("mmapfile: Windows is not supported yet: %w", errors.ErrUnsupported)

// PageSize is the system's memory page size.
var PageSize = os.Getpagesize()

// Advice names the madvise hints pagelog uses; none exist here.
type Advice int

const (
	Normal     Advice = -1
	Random     Advice = -1
	Sequential Advice = -1
	WillNeed   Advice = -1
	DontNeed   Advice = -1
	HugePage   Advice = -1
)

// DsyncFlag is O_SYNC.
const DsyncFlag = os.O_SYNC

func Map(f *os.File, size int, writable bool) ([]byte, error) { return nil, errWindows }
func Unmap(b []byte) error                                    { return errWindows }
func SyncRange(b []byte, off, n int) error                    { return errWindows }
func Advise(b []byte, off, n int, a Advice) error             { return nil }
func Populate(b []byte, off, n int) error                     { return nil }
func Allocate(f *os.File, off, n int64) error                 { return allocateByWrite(f, off, n) }
func ZeroRange(f *os.File, off, n int64) error                { return writeZeros(f, off, n) }
func Datasync(f *os.File) error                               { return f.Sync() }
func OpenRead(path string) (*os.File, error)                  { return os.Open(path) }
