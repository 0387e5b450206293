package checkpoint

import (
	"os"
	"path/filepath"
	"sync"
)

// syncHooks routes the syncs of the files of a directory, and of the
// directory itself, to a test's hook (see SetSyncHook): keyed by the
// cleaned directory path. Empty in production: one lookup per checkpoint
// written, per directory sync and per log opened, each of which costs an
// fsync or more anyway.
var syncHooks sync.Map

// SetSyncHook makes hook take the place of fdatasync and fsync for the
// files of dir and for dir itself, for a test that watches which syncs
// really happen (a simulated disk that builds what a power failure would
// leave from them): the checkpoints written there (Replace: the temporary
// file, then the directory), the directory syncs of SyncDir, and the
// segment files and directory syncs of a log opened there afterwards
// (engine). Only files directly in dir are covered, not those of its
// subdirectories. The returned function removes the hook. For tests only.
func SetSyncHook(dir string, hook func(*os.File) error) (remove func()) {
	key, h := filepath.Clean(dir), &syncHook{hook}
	syncHooks.Store(key, h)
	return func() { syncHooks.CompareAndDelete(key, h) }
}

type syncHook struct{ f func(*os.File) error }

// SyncHook returns the hook SetSyncHook set for dir, nil when none.
func SyncHook(dir string) func(*os.File) error {
	if h, ok := syncHooks.Load(filepath.Clean(dir)); ok {
		return h.(*syncHook).f
	}
	return nil
}

// syncWith syncs the file at path through hook.
func syncWith(path string, hook func(*os.File) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = hook(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
