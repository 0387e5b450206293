package queue

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/testkit"
)

// closedQueue makes a queue with a few messages, one deleted, closed
// (queue.head written).
func closedQueue(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	q, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := q.Send([]byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	m, ok, err := q.TryReceive()
	if err != nil || !ok {
		t.Fatalf("TryReceive: %v, %v", ok, err)
	}
	if err := q.Delete(m.Offset); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenNeverOverwritesANewerHeadCheckpoint(t *testing.T) {
	dir := closedQueue(t)
	path := filepath.Join(dir, headName)
	newer := checkpoint.Seal([]byte{headVersion + 1, 'n', 'e', 'w', 'e', 'r', 0, 0, 0, 0})
	if err := os.WriteFile(path, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	q, err := Open(dir, Options{})
	if err == nil {
		_ = q.Close() // Close writes queue.head
	}
	if !errors.Is(err, engine.ErrNewerFile) || !errors.Is(err, engine.ErrBadFile) {
		t.Errorf("Open: %v, want ErrNewerFile", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, newer) {
		t.Fatalf("queue.head after the open: % x, want it unchanged", got)
	}
}

func TestOpenRefusesWhatIsNotAFileInPlaceOfTheHeadCheckpoint(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	for name, plant := range map[string]func(path string) error{
		"a FIFO":          func(path string) error { return testkit.Mkfifo(path) },
		"a directory":     func(path string) error { return os.Mkdir(path, 0o700) },
		"a symbolic link": func(path string) error { return os.Symlink(outside, path) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := closedQueue(t)
			path := filepath.Join(dir, headName)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := plant(path); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				q, err := Open(dir, Options{})
				if err == nil {
					err = q.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, engine.ErrNotRegular) || !strings.Contains(err.Error(), path+" is "+name) {
					t.Fatalf("Open: %v, want ErrNotRegular saying %s is %s", err, path, name)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("Open blocked on %s in place of queue.head", name)
			}
		})
	}
}
