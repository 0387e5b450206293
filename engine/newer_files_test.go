package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/internal/checkpoint"
)

// newerCheckpoint is a checkpoint file as a newer version might write it:
// version 2, another size, a CRC-32C that checks out.
func newerCheckpoint() []byte {
	b := []byte{2, 'n', 'e', 'w', 'e', 'r', 0, 0, 0, 0, 0, 0, 0, 0}
	return checkpoint.Seal(b)
}

func TestWritableOpenNeverOverwritesANewerCheckpoint(t *testing.T) {
	for _, name := range []string{metaName, logIDName, cleanName, recoveryName} {
		t.Run(name, func(t *testing.T) {
			dir := closedLog(t)
			path := filepath.Join(dir, name)
			newer := newerCheckpoint()
			if err := os.WriteFile(path, newer, 0o600); err != nil {
				t.Fatal(err)
			}
			// New settings would rewrite log.meta; the open would remove
			// log.clean; a synced append would rewrite log.recovery.
			err := openAndClose(dir, Options{SegmentBytes: 1 << 20, Sync: SyncAlways})
			if !errors.Is(err, ErrNewerFile) || !errors.Is(err, ErrBadFile) {
				t.Errorf("Open: %v, want ErrNewerFile", err)
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, newer) {
				t.Fatalf("%s after the open: % x, %v; want it unchanged", name, got, err)
			}
		})
	}
}

func TestReadOnlyOpenOfANewerLogMetaFails(t *testing.T) {
	dir := closedLog(t)
	if err := os.WriteFile(filepath.Join(dir, metaName), newerCheckpoint(), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := OpenReadOnly(dir, Options{}); !errors.Is(err, ErrNewerFile) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("OpenReadOnly: %v, want ErrNewerFile: the settings are another format's", err)
	}
}
