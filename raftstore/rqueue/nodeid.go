package rqueue

import (
	"errors"
	"fmt"
	"io"

	"github.com/pagelog/pagelog/raftstore"
)

// ErrNodeIDChanged is returned by Start for a directory first used by a
// node of another id: raft's term and vote there were cast as that node,
// and counting them for another could let one term have two votes from
// one directory.
var ErrNodeIDChanged = errors.New("rqueue: the node id differs from the one the directory was first used by")

// checkNodeID compares id with the node id the store records, and records
// id when there is none. A store with raft state but no id (a directory
// from before raft.node) takes id, and says so on log.
func checkNodeID(s *raftstore.Store, dir, id string, hasState bool, log io.Writer) error {
	stored, err := s.NodeID()
	if err != nil {
		return fmt.Errorf("rqueue: %s: %w", dir, err)
	}
	if stored == id {
		return nil
	}
	if stored != "" {
		return fmt.Errorf("%w: %s holds the raft state (term and vote) of node %q, the node was given id %q "+
			"(start it with its own id; another node needs a directory of its own)",
			ErrNodeIDChanged, dir, stored, id)
	}
	if hasState {
		fmt.Fprintf(log, "rqueue: %s has raft state but records no node id (made before raft.node was kept): recording %q, the id it is started with\n", dir, id)
	}
	if err := s.SetNodeID(id); err != nil {
		return fmt.Errorf("rqueue: %s: %w", dir, err)
	}
	return nil
}
