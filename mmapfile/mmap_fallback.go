//go:build unix && !linux && !darwin && !freebsd

package mmapfile

import "os"

// The other BSDs and Unix systems: no fallocate, no fdatasync.

// Allocate extends f with zeros written to the disk.
func Allocate(f *os.File, off, n int64) error { return allocateByWrite(f, off, n) }

// Datasync flushes f with fsync.
func Datasync(f *os.File) error { return f.Sync() }

// DsyncFlag is O_SYNC here (not every system has O_DSYNC): it promises
// more than O_DSYNC, the written range durable when the write returns.
const DsyncFlag = os.O_SYNC
