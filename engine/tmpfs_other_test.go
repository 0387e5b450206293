//go:build !linux

package engine

import "testing"

// mountTmpfs skips: mounting a small file system to fill is Linux's
// (tmpfs, by a test running as root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	t.Skip("needs a Linux tmpfs to fill")
	return ""
}

// punchFrom skips: punching a hole is Linux's fallocate.
func punchFrom(t *testing.T, path string, off int64) {
	t.Helper()
	t.Skip("needs Linux's FALLOC_FL_PUNCH_HOLE")
}
