package rqueue

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
)

// ErrPeersChanged is returned by Start, with Config.CheckPeers, for a node
// that has raft state whose stored configuration (the servers, their
// addresses and votes) is not Config.Peers.
var ErrPeersChanged = errors.New("rqueue: the peers differ from the cluster configuration stored by raft")

// checkPeers returns an ErrPeersChanged naming both configurations when
// stored and given differ (in any order).
func checkPeers(dir string, stored, given []raft.Server) error {
	s, g := formatServers(stored), formatServers(given)
	if s == g {
		return nil
	}
	return fmt.Errorf("%w: %s holds %s, the node was given %s (raft reads the peers only when a node has no state; "+
		"raftstore/README.md, \"Addresses and members\", says how to change them)",
		ErrPeersChanged, dir, s, g)
}

// formatServers writes servers as ID=ADDRESS,... sorted by id, a server
// without a vote marked "(nonvoter)".
func formatServers(servers []raft.Server) string {
	parts := make([]string, 0, len(servers))
	for _, s := range servers {
		p := string(s.ID) + "=" + string(s.Address)
		if s.Suffrage != raft.Voter {
			p += " (" + strings.ToLower(s.Suffrage.String()) + ")"
		}
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
