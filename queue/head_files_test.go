package queue

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/checkpoint"
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

func TestOpenRefusesAFIFOInPlaceOfTheHeadCheckpoint(t *testing.T) {
	dir := closedQueue(t)
	path := filepath.Join(dir, headName)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
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
		if !errors.Is(err, engine.ErrNotRegular) {
			t.Fatalf("Open: %v, want ErrNotRegular", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Open blocked on a FIFO in place of queue.head")
	}
}
