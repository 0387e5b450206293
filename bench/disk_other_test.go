//go:build !unix

package bench

import "io/fs"

// allocatedBytes returns the file's size (the system does not say how many
// blocks it takes).
func allocatedBytes(info fs.FileInfo) int64 { return info.Size() }
