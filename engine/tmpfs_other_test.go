//go:build !linux

package engine

import "testing"

// punchFrom skips: punching a hole is Linux's fallocate.
func punchFrom(t *testing.T, path string, off int64) {
	t.Helper()
	t.Skip("needs Linux's FALLOC_FL_PUNCH_HOLE")
}
