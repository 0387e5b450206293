package raftstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// The node id is kept across a reopen; a damaged raft.node is an
// ErrBadFile, never an id nobody set.
func TestNodeIDKeptAndDamageReported(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, testOptions())
	if id, err := s.NodeID(); err != nil || id != "" {
		t.Fatalf("new store: NodeID %q, %v; want none", id, err)
	}
	for _, bad := range []string{"", strings.Repeat("x", MaxNodeIDBytes+1)} {
		if err := s.SetNodeID(bad); !errors.Is(err, engine.ErrBadOptions) {
			t.Errorf("SetNodeID of %d bytes: %v, want ErrBadOptions", len(bad), err)
		}
	}
	if err := s.SetNodeID("n1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NodeID(); !errors.Is(err, ErrClosed) {
		t.Errorf("NodeID after Close: %v, want ErrClosed", err)
	}
	s = openTest(t, dir, testOptions())
	if id, err := s.NodeID(); err != nil || id != "n1" {
		t.Fatalf("reopened: NodeID %q, %v; want n1", id, err)
	}
	path := filepath.Join(dir, nodeName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte{}, good...)
	flipped[2] ^= 1
	version := append([]byte{}, good...)
	version[0] = 2
	for name, b := range map[string][]byte{
		"empty": {}, "short": good[:5], "flipped": flipped, "version": version,
		"long": sealed(append([]byte{nodeVersion}, strings.Repeat("x", MaxNodeIDBytes+1)...)),
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if id, err := s.NodeID(); !errors.Is(err, ErrBadFile) {
			t.Errorf("%s raft.node: NodeID %q, %v; want ErrBadFile", name, id, err)
		}
	}
}
