// Package checkpoint writes and checks the small checkpoint files of a log
// and of a queue (log.meta, log.clean, log.recovery, queue.head): a
// version byte, big-endian fields, then a CRC-32C of the bytes before it,
// replaced atomically (a temporary file, fsync, rename over the old one,
// fsync of the directory). A file that fails its checks is never trusted:
// its reader falls back to what the log itself says.
package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/pagelog/pagelog/internal/regfile"
)

// ErrBadFile is matched by every BadFileError.
var ErrBadFile = errors.New("pagelog: damaged checkpoint file")

// ErrNewer is matched by a BadFileError for a file that a newer version
// wrote (see Newer); it matches ErrBadFile too.
var ErrNewer = errors.New("pagelog: file written by a newer version")

// BadFileError reports a checkpoint file that fails its checks.
type BadFileError struct {
	Name  string // the file's name
	Why   string // what is wrong with it
	Newer bool   // a newer version's file: never to be overwritten
}

func (e *BadFileError) Error() string {
	if e.Newer {
		return "pagelog: " + e.Name + " was written by a newer version: " + e.Why
	}
	return "pagelog: " + e.Name + " is damaged: " + e.Why
}

func (e *BadFileError) Unwrap() []error {
	if e.Newer {
		return []error{ErrBadFile, ErrNewer}
	}
	return []error{ErrBadFile}
}

// Newer returns a *BadFileError matching ErrNewer when b is a newer
// version's file: its version byte is above version and its last 4 bytes
// are the CRC-32C of the bytes before them (every version of every
// checkpoint ends so), whatever its size. Such a file is never trusted,
// and never overwritten or removed either: a writer that would replace it
// refuses to open instead. nil otherwise (a file of this version, or a
// damaged one).
func Newer(b []byte, name string, version byte) error {
	if len(b) < 5 || b[0] <= version {
		return nil
	}
	if binary.BigEndian.Uint32(b[len(b)-4:]) != Sum(b[:len(b)-4]) {
		return nil
	}
	return &BadFileError{Name: name, Newer: true, Why: fmt.Sprintf("version %d, this build reads %d and never overwrites it", b[0], version)}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sum is the CRC-32C every checkpoint ends with.
func Sum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Seal writes the CRC-32C of b[:len(b)-4] into its last 4 bytes.
func Seal(b []byte) []byte {
	binary.BigEndian.PutUint32(b[len(b)-4:], Sum(b[:len(b)-4]))
	return b
}

// Check checks the size, version byte and trailing CRC-32C of a checkpoint
// named name. A file that fails gives a *BadFileError.
func Check(b []byte, size int, name string, version byte) error {
	if len(b) != size {
		return &BadFileError{Name: name, Why: fmt.Sprintf("%d bytes, want %d", len(b), size)}
	}
	if b[0] != version {
		return &BadFileError{Name: name, Why: fmt.Sprintf("version %d, this build reads %d", b[0], version)}
	}
	if got, want := binary.BigEndian.Uint32(b[size-4:]), Sum(b[:size-4]); got != want {
		return &BadFileError{Name: name, Why: fmt.Sprintf("checksum %08x, want %08x", got, want)}
	}
	return nil
}

// MaxSize bounds what Read reads: no checkpoint of any version is larger
// (each is a few dozen bytes).
const MaxSize = 64 << 10

// Read reads the checkpoint file dir/name as regfile.ReadFile does
// (regular files only, never through a link), but never more than
// MaxSize bytes: a larger file is damaged (a *BadFileError), never read
// whole, whatever size it claims (a sparse file of gigabytes costs nothing
// on disk).
func Read(dir, name string) ([]byte, error) {
	b, err := regfile.ReadFileMax(filepath.Join(dir, name), MaxSize)
	var se *regfile.SizeError
	if errors.As(err, &se) {
		return nil, &BadFileError{Name: name, Why: fmt.Sprintf("%d bytes, more than the %d any version writes", se.Size, se.Max)}
	}
	return b, err
}

// Replace writes data to dir/name atomically: a temporary file, fsync,
// rename over the old one, fsync of the directory. Whatever is at the
// temporary name is removed first, never written through (a symbolic
// link), and the rename replaces a link at name rather than follow it.
func Replace(dir, name string, data []byte, mode os.FileMode) error {
	path := filepath.Join(dir, name)
	tmp := path + ".tmp"
	hook := SyncHook(dir)
	err := regfile.WriteNew(tmp, data, mode, hook == nil)
	if err == nil && hook != nil {
		err = syncWith(tmp, hook)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pagelog: write %s: %w", name, err)
	}
	return SyncDir(dir)
}

// SyncDir makes the directory's entries (new, renamed and removed files)
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("pagelog: sync directory: %w", err)
	}
	if hook := SyncHook(dir); hook != nil {
		err = hook(d)
	} else {
		err = d.Sync()
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pagelog: sync directory %s: %w", dir, err)
	}
	return nil
}
