package rqueue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/queue"
)

// startAs starts node id on dir with its raft log in logPath, and returns
// the node (nil) and Start's error.
func startAs(t *testing.T, id, dir, logPath string) (*Node, error) {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	_, tr := raft.NewInmemTransport("solo")
	return Start(Config{
		ID: id, Dir: dir, Transport: tr, Bootstrap: true,
		Queue: queue.Options{Visibility: time.Minute}, Raft: testRaft, NoSync: true, LogOutput: logf,
	})
}

// waitLeading waits until n serves.
func waitLeading(t *testing.T, n *Node) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); n.leading() != nil; {
		if time.Now().After(deadline) {
			t.Fatal("no leader within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A directory first used by n1 refuses to start as n2, naming both ids,
// and leaves n1's messages alone; n1 starts on it again.
func TestRestartWithOtherNodeIDIsRefused(t *testing.T) {
	dir, logPath := filepath.Join(t.TempDir(), "node"), filepath.Join(t.TempDir(), "raft.log")
	n, err := startAs(t, "n1", dir, logPath)
	if err != nil {
		t.Fatal(err)
	}
	waitLeading(t, n)
	if _, err := n.Send(context.Background(), []Outgoing{{Body: []byte("kept")}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "records no node id") {
		t.Errorf("a new directory was reported as one without a node id:\n%s", b)
	}
	n, err = startAs(t, "n2", dir, logPath)
	if err == nil {
		n.Close()
		t.Fatal("n1's directory started as n2")
	}
	if !errors.Is(err, ErrNodeIDChanged) || !strings.Contains(err.Error(), `"n1"`) || !strings.Contains(err.Error(), `"n2"`) {
		t.Fatalf("start as n2: %v; want ErrNodeIDChanged naming n1 and n2", err)
	}
	n, err = startAs(t, "n1", dir, logPath)
	if err != nil {
		t.Fatalf("restart as n1: %v", err)
	}
	defer n.Close()
	waitLeading(t, n)
	if d, err := n.Digest(); err != nil || d.Messages != 1 {
		t.Fatalf("n1 after the refused start: %+v, %v; want its message", d, err)
	}
}

// A directory with raft state but no recorded node id (made before the id
// was kept) takes the id it is started with, says so, and refuses another
// one afterwards.
func TestDirectoryWithoutNodeIDTakesTheGivenOne(t *testing.T) {
	dir, logPath := filepath.Join(t.TempDir(), "node"), filepath.Join(t.TempDir(), "raft.log")
	n, err := startAs(t, "n1", dir, logPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "raft", "raft.node")); err != nil {
		t.Fatal(err)
	}
	if n, err = startAs(t, "n1", dir, logPath); err != nil {
		t.Fatalf("start on a directory without a node id: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(logPath); !strings.Contains(string(b), `records no node id`) || !strings.Contains(string(b), `recording "n1"`) {
		t.Errorf("the log does not say the id was adopted:\n%s", b)
	}
	if n, err = startAs(t, "n2", dir, logPath); !errors.Is(err, ErrNodeIDChanged) {
		if err == nil {
			n.Close()
		}
		t.Fatalf("start as n2 after n1 was adopted: %v; want ErrNodeIDChanged", err)
	}
}
