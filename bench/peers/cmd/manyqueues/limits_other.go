//go:build !unix

package main

import (
	"io/fs"
	"path/filepath"
)

func raiseNoFile(uint64) (soft, hard uint64) { return 0, 0 }

// diskUsage sums the files' sizes under dir (no block counts here).
func diskUsage(dir string) (bytes int64, files int, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		bytes += fi.Size()
		files++
		return nil
	})
	return bytes, files, err
}
