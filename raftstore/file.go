package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pagelog/pagelog/internal/regfile"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sealed appends the CRC-32C of b to b: the last four bytes of every small
// file the store writes.
func sealed(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// unseal checks the CRC-32C at the end of b and returns the bytes before it.
func unseal(b []byte) ([]byte, bool) {
	if len(b) < 4 {
		return nil, false
	}
	body, sum := b[:len(b)-4], b[len(b)-4:]
	return body, crc32.Checksum(body, castagnoli) == binary.BigEndian.Uint32(sum)
}

// replaceFile writes data to dir/name atomically: a temporary file, synced,
// renamed over the old one, then the directory synced (unless nosync). A
// crash leaves the old file or the new one, never a mix.
func replaceFile(dir, name string, data []byte, mode fs.FileMode, nosync bool) error {
	path := filepath.Join(dir, name)
	tmp := path + ".tmp"
	// Whatever is at the temporary name is removed, never written
	// through; the file is created with O_EXCL (regfile).
	err := regfile.WriteNew(tmp, data, mode, !nosync)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("raftstore: write %s: %w", name, err)
	}
	if nosync {
		return nil
	}
	return syncDir(dir)
}

// maxFileSize bounds what readFile reads: raft.stable, raft.bounds and
// raft.node are a few dozen bytes; a larger file (a sparse one of
// gigabytes, say) is an error, never read whole.
const maxFileSize = 64 << 10

// readFile returns the content of dir/name, or nil and false when it does
// not exist.
func readFile(dir, name string) ([]byte, bool, error) {
	b, err := regfile.ReadFileMax(filepath.Join(dir, name), maxFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("raftstore: read %s: %w", name, err)
	}
	return b, true, nil
}

// syncDir makes the directory's entries (creations, renames, removals)
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("raftstore: sync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftstore: sync directory %s: %w", dir, err)
	}
	return nil
}
