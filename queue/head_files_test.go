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

// queue.head: any bytes decode to a head or an error, never a panic nor
// an allocation past what the file holds; a head decoded has its end at
// or above its head; an index of moved copies decoded has at most
// maxIndexedRuns runs, ascending and not empty, and encodes back to the
// same bytes (version 4). Every truncation and every flipped bit of a
// valid version 4 file is in the seeds.
func FuzzHeadCheckpoint(f *testing.F) {
	h := headState{head: 3, end: 90, sides: true, dels: sideSpan{from: 2, durable: 4}, recvs: sideSpan{from: 1, durable: 7}}
	v4 := encodeHeadIndexed(h, movedIndex{runs: [][2]uint64{{5, 9}, {20, 21}}, ok: true})
	f.Add(v4)
	f.Add(encodeHeadIndexed(h, movedIndex{}))
	f.Add(encodeHead(h))
	for n := range len(v4) {
		f.Add(v4[:n])
	}
	for i := range len(v4) * 8 {
		b := bytes.Clone(v4)
		b[i/8] ^= 1 << (i % 8)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHead(b)
		if err != nil {
			return
		}
		if h.end < h.head {
			t.Fatalf("decodeHead(%x): end %d below head %d", b, h.end, h.head)
		}
		idx := decodeHeadIndex(b)
		if !idx.ok {
			return
		}
		if len(idx.runs) > maxIndexedRuns || len(idx.runs) > len(b)/16 {
			t.Fatalf("decodeHeadIndex(%x): %d runs", b, len(idx.runs))
		}
		for k, r := range idx.runs {
			if r[0] >= r[1] || k > 0 && r[0] < idx.runs[k-1][1] {
				t.Fatalf("decodeHeadIndex(%x): run %d %v", b, k, r)
			}
		}
		if got := encodeHeadIndexed(h, idx); !bytes.Equal(got, b) {
			t.Fatalf("decodeHead(%x) = %+v %+v, which encodes to %x", b, h, idx, got)
		}
	})
}
