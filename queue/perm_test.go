package queue

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// TestFileModes: files are created 0600 and directories 0700 unless the
// Options say otherwise (the queue's delete log included).
func TestFileModes(t *testing.T) {
	for _, tc := range []struct {
		name          string
		file, dirMode os.FileMode
		wantF, wantD  os.FileMode
	}{
		{"defaults", 0, 0, 0o600, 0o700},
		{"options", 0o640, 0o750, 0o640, 0o750},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := unixUmask(0)
			defer unixUmask(old)
			dir := filepath.Join(t.TempDir(), "q")
			q, err := Open(dir, Options{Log: engine.Options{FileMode: tc.file, DirMode: tc.dirMode, SegmentBytes: 4096}})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 50; i++ {
				if _, err := q.Send(make([]byte, 200)); err != nil {
					t.Fatal(err)
				}
			}
			m, err := q.Receive(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Delete(m.Offset); err != nil {
				t.Fatal(err)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			n := 0
			err = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
				if err != nil {
					return err
				}
				want := tc.wantF
				if info.IsDir() {
					want = tc.wantD
				}
				if got := info.Mode().Perm(); got != want {
					t.Errorf("%s: mode %o, want %o", path, got, want)
				}
				n++
				return nil
			})
			if err != nil || n < 8 {
				t.Fatalf("walked %d files: %v", n, err)
			}
		})
	}
}
