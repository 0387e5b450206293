package testkit

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// HashOptions says what HashDir takes in.
type HashOptions struct {
	Tree      bool                   // dir itself (as ".") and its subdirectories too, their entries named by their path under dir
	FilesOnly bool                   // no entry for a directory (its files are still walked with Tree)
	ModTimes  bool                   // an entry's modification time is part of its fingerprint
	Inodes    bool                   // and its inode number
	Skip      func(name string) bool // entries (named as in the result) to leave out
}

// HashDir returns a fingerprint of each entry of dir, by name: its mode
// and size (and, as o says, modification time and inode number), and the
// SHA-256 of a regular file's contents. An entry removed between the
// listing and its reading (by a log's background work) is left out, as a
// crash between the two would leave it.
func HashDir(dir string, o HashOptions) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path != dir {
			return nil
		}
		if err != nil {
			return err
		}
		if path == dir && !o.Tree {
			return nil
		}
		name, _ := filepath.Rel(dir, path)
		name = filepath.ToSlash(name)
		skipDir := d.IsDir() && !o.Tree
		switch {
		case o.Skip != nil && o.Skip(name):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir() && o.FilesOnly:
			if skipDir {
				return filepath.SkipDir
			}
			return nil
		}
		fp, err := fingerprint(path, d, o)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		out[name] = fp
		if skipDir {
			return filepath.SkipDir
		}
		return nil
	})
	return out, err
}

func fingerprint(path string, d fs.DirEntry, o HashOptions) (string, error) {
	info, err := d.Info()
	if err != nil {
		return "", err
	}
	fp := fmt.Sprintf("%v %d", info.Mode(), info.Size())
	if o.ModTimes {
		fp += " " + info.ModTime().String()
	}
	if o.Inodes {
		fp += fmt.Sprintf(" inode %d", Inode(info))
	}
	if d.Type().IsRegular() {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		fp += fmt.Sprintf(" %x", sha256.Sum256(b))
	}
	return fp, nil
}

// MustHashDir is HashDir, failing the test on an error.
func MustHashDir(t testing.TB, dir string, o HashOptions) map[string]string {
	t.Helper()
	h, err := HashDir(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// DirDigest is one SHA-256 over HashDir's fingerprints: equal digests, the
// same entries.
func DirDigest(t testing.TB, dir string, o HashOptions) string {
	t.Helper()
	h := MustHashDir(t, dir, o)
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	sum := sha256.New()
	for _, name := range names {
		fmt.Fprintf(sum, "%s\x00%s\x00", name, h[name])
	}
	return fmt.Sprintf("%x", sum.Sum(nil))
}

// DiffHashes says, in name order, which entries of a are removed or
// changed in b and which of b are added: "" when they are the same.
func DiffHashes[V comparable](a, b map[string]V) string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, k+" removed")
		} else if w != v {
			d = append(d, k+" changed")
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, k+" added")
		}
	}
	slices.Sort(d)
	return strings.Join(d, ", ")
}
