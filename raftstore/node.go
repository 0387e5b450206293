package raftstore

import (
	"fmt"

	"github.com/pagelog/pagelog/engine"
)

// raft.node: the id of the raft server whose term and vote the store
// holds. Raft's vote is cast by a server id: a store opened by another
// node would let that one vote again in a term the first one voted in.
//
// On-disk format: never change, bump nodeVersion instead.
//
//	byte  size  field
//	0     1     version (1)
//	1     N     the node id (N >= 1 bytes: the rest of the file but 4)
//	1+N   4     CRC-32C of bytes 0..N
const (
	nodeName    = "raft.node"
	nodeVersion = 1
	// MaxNodeIDBytes bounds the node id SetNodeID records.
	MaxNodeIDBytes = 1024
)

func decodeNode(b []byte) (string, error) {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadFile, nodeName, fmt.Sprintf(why, args...))
	}
	body, ok := unseal(b)
	switch {
	case len(b) < 6:
		return "", bad("%d bytes, shorter than the smallest file (6)", len(b))
	case len(b) > 5+MaxNodeIDBytes:
		return "", bad("%d bytes, longer than the largest file (%d)", len(b), 5+MaxNodeIDBytes)
	case body[0] != nodeVersion:
		return "", bad("version %d, this build reads %d", body[0], nodeVersion)
	case !ok:
		return "", bad("checksum mismatch")
	}
	return string(body[1:]), nil
}

// NodeID returns the node id recorded by SetNodeID, or "" when none was.
// A damaged raft.node is an ErrBadFile.
func (s *Store) NodeID() (string, error) {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if s.closed.Load() {
		return "", ErrClosed
	}
	b, ok, err := readFile(s.dir, nodeName)
	if err != nil || !ok {
		return "", err
	}
	return decodeNode(b)
}

// SetNodeID records id as the node the store belongs to, in raft.node,
// replaced atomically and durable when it returns (unless
// Options.NoSync). The store does not check it: its user (rqueue.Start)
// compares NodeID with the id it runs as before raft reads the term and
// the vote.
func (s *Store) SetNodeID(id string) error {
	if id == "" || len(id) > MaxNodeIDBytes {
		return fmt.Errorf("%w: raftstore: node id of %d bytes: want 1 to %d", engine.ErrBadOptions, len(id), MaxNodeIDBytes)
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	return replaceFile(s.dir, nodeName, sealed(append([]byte{nodeVersion}, id...)), s.fileMode, s.opts.NoSync)
}
