package testkit

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// CopyDir copies the regular files of src into dst, which it makes if
// missing, and with tree those of src's subdirectories into
// subdirectories it makes the same. A file renamed or removed since the
// listing (by a live log's background work: a roll naming its index
// files, a drop) is left out, as a crash between the two would leave it,
// which recovery must take. Files are made 0600, directories 0700.
func CopyDir(src, dst string, tree bool) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path != src {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		switch {
		case path == src:
			return os.MkdirAll(dst, 0o700)
		case d.IsDir() && !tree:
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(to, 0o700)
		case !d.Type().IsRegular():
			return nil
		}
		if err := CopyFile(path, to); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}

// MustCopyDir is CopyDir, failing the test on an error.
func MustCopyDir(t testing.TB, src, dst string, tree bool) {
	t.Helper()
	if err := CopyDir(src, dst, tree); err != nil {
		t.Fatal(err)
	}
}

// CopyFile copies the file src to dst (made 0600, or emptied first).
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
