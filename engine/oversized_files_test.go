package engine

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// allocated returns the bytes allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A small file of the log (log.meta, log.id, log.clean, log.recovery)
// grown huge (sparse: it costs no disk) is damaged, and is never read
// whole: a reader that did would allocate its size.
func TestOversizedSmallFilesAreNotReadWhole(t *testing.T) {
	const huge = 64 << 20
	for _, name := range []string{metaName, logIDName, cleanName, recoveryName} {
		t.Run(name, func(t *testing.T) {
			dir := closedLog(t)
			if err := os.Truncate(filepath.Join(dir, name), huge); err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				f, err := os.Create(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				err = f.Truncate(huge)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			var roErr error
			n := allocated(func() {
				l, err := OpenReadOnly(dir, Options{})
				if err == nil {
					l.Close()
				}
				roErr = err
			})
			if n > 16<<20 {
				t.Errorf("OpenReadOnly (%v) allocated %d bytes for a %d-byte %s", roErr, n, huge, name)
			}
			var err error
			n = allocated(func() { err = openAndClose(dir, Options{}) })
			if n > 16<<20 {
				t.Errorf("Open (%v) allocated %d bytes for a %d-byte %s", err, n, huge, name)
			}
			if name == metaName && !errors.Is(err, ErrBadFile) && err != nil {
				t.Errorf("Open: %v, want nil or ErrBadFile", err)
			}
		})
	}
}
