// Package tmpfstest mounts the small tmpfs file systems of the tests that
// need a real full disk (ENOSPC): one place decides whether a test that
// cannot mount one skips or fails. It skips, saying why, where a test may
// not mount (not root, no CAP_SYS_ADMIN, another system); it fails when
// the environment variable PAGELOG_REQUIRE_TMPFS is 1, which `make test`
// sets when it runs as root (as CI does), so that these tests never stop
// running unnoticed. For tests only.
package tmpfstest

import (
	"os"
	"testing"
)

// RequireEnv is the environment variable that turns a failed mount into a
// test failure.
const RequireEnv = "PAGELOG_REQUIRE_TMPFS"

// Mount mounts a tmpfs of size (as mount's size option: "4m") on a new
// temporary directory and returns it; the test's cleanup unmounts it.
func Mount(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := mount(dir, size); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("cannot mount a tmpfs here (%v), and %s=1 requires it", err, RequireEnv)
		}
		t.Skipf("cannot mount a tmpfs here (%v); %s=1 makes this a failure", err, RequireEnv)
	}
	t.Cleanup(func() { unmount(dir) })
	return dir
}
