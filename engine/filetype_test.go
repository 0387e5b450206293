package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// returns runs f in a goroutine and fails the test when it has not
// returned in time: an open that blocks on a FIFO never returns.
func returns(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s blocked", what)
		return nil
	}
}

// smallFileNames are the names of the files a log keeps beside its
// records, and the three files of its first segment.
var smallFileNames = []string{
	metaName, logIDName, cleanName, recoveryName, lockName, notifyName,
	segment.Name(0, segment.LogSuffix), segment.Name(0, segment.IndexSuffix), segment.Name(0, segment.TimeIndexSuffix),
}

// closedLog makes a log of 20 records, closed cleanly.
func closedLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 20, func(uint64) int { return 100 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func openAndClose(dir string, opts Options) error {
	l, err := Open(dir, opts)
	if err == nil {
		_, err = l.Append([]byte("after"))
		err = errors.Join(err, l.Close())
	}
	return err
}

func TestOpenRefusesAFIFOInPlaceOfAFile(t *testing.T) {
	for _, name := range smallFileNames {
		t.Run(name, func(t *testing.T) {
			dir := closedLog(t)
			path := filepath.Join(dir, name)
			_ = os.Remove(path)
			if err := testkit.Mkfifo(path); err != nil {
				t.Fatal(err)
			}
			err := returns(t, "Open", func() error { return openAndClose(dir, Options{}) })
			// log.notify is a hint: a writable open goes on without it.
			if name != notifyName && (!errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), path)) {
				t.Errorf("Open: %v, want ErrNotRegular naming %s", err, path)
			}
			err = returns(t, "OpenReadOnly", func() error {
				l, err := OpenReadOnly(dir, Options{})
				if err == nil {
					err = l.Close()
				}
				return err
			})
			if err != nil && !errors.Is(err, ErrNotRegular) {
				t.Errorf("OpenReadOnly: %v, want nil or ErrNotRegular", err)
			}
			returns(t, "Cursors", func() error { _, err := Cursors(dir); return err })
		})
	}
}

func TestOpenRefusesALinkInPlaceOfAFile(t *testing.T) {
	for _, name := range smallFileNames {
		t.Run(name, func(t *testing.T) {
			dir := closedLog(t)
			path := filepath.Join(dir, name)
			outside := filepath.Join(t.TempDir(), "outside")
			// A copy of the file outside (or no file, for one that a
			// writer creates), linked in its place.
			old, err := os.ReadFile(path)
			if err == nil {
				if err := os.WriteFile(outside, old, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_ = os.Remove(path)
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
			err = openAndClose(dir, Options{SegmentBytes: 1 << 20})
			if name != notifyName && (!errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), path)) {
				t.Errorf("Open: %v, want ErrNotRegular naming %s", err, path)
			}
			got, rerr := os.ReadFile(outside)
			if old == nil && !errors.Is(rerr, os.ErrNotExist) || old != nil && !bytes.Equal(got, old) {
				t.Errorf("the file outside the log was written through the link (%d bytes, %v; was %d bytes)", len(got), rerr, len(old))
			}
			if st, err := os.Lstat(path); name != notifyName && (err != nil || st.Mode()&os.ModeSymlink == 0) {
				t.Errorf("the link was replaced: %v, %v", st, err)
			}
		})
	}
}

func TestCheckpointNeverWritesThroughALinkAtItsTemporaryName(t *testing.T) {
	dir := closedLog(t)
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{metaName, cleanName, recoveryName, logIDName} {
		if err := os.Symlink(outside, filepath.Join(dir, name+".tmp")); err != nil {
			t.Fatal(err)
		}
	}
	// New settings rewrite log.meta; Close writes log.clean.
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 20, Sync: SyncAlways})
	appendN(t, l, 3, func(uint64) int { return 10 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
		t.Fatalf("the file outside reads %q, %v: a checkpoint was written through the link at its temporary name", b, err)
	}
	if m, ok, err := readMeta(dir); err != nil || !ok || m.SegmentBytes != 1<<20 {
		t.Fatalf("log.meta: %+v, %v, %v", m, ok, err)
	}
}
