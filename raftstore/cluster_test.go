package raftstore

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// listFSM keeps the commands it applied, in order.
type listFSM struct {
	mu   sync.Mutex
	cmds []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, string(l.Data))
	return len(f.cmds)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(slices.Clone(f.cmds)), nil
}

func (f *listFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var cmds []string
	if len(b) > 0 {
		cmds = strings.Split(string(b), "\n")
	}
	f.mu.Lock()
	f.cmds = cmds
	f.mu.Unlock()
	return nil
}

func (f *listFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cmds)
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write([]byte(strings.Join(s, "\n"))); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnapshot) Release() {}

// node is one member of the test cluster: its own store directory (log,
// stable store and snapshots), FSM, transport and raft.
type node struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	dir   string
	store *Store
	trans *raft.InmemTransport
	fsm   *listFSM
	raft  *raft.Raft
}

func clusterConfig(id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 200 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	// Snapshots and compaction while the test runs: prefix DeleteRanges on
	// every node, and a restarted node that may need a snapshot installed.
	c.SnapshotThreshold = 40
	c.SnapshotInterval = 50 * time.Millisecond
	c.TrailingLogs = 20
	c.LogOutput = io.Discard
	return c
}

// start opens the node's store and snapshots from its directory and starts
// raft on them.
func (n *node) start(t *testing.T) {
	t.Helper()
	var err error
	if n.store, err = Open(filepath.Join(n.dir, "raft"), Options{}); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(n.dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n.addr, n.trans = raft.NewInmemTransport(n.addr)
	n.fsm = &listFSM{}
	if n.raft, err = raft.NewRaft(clusterConfig(n.id), n.fsm, n.store, n.store, snaps, n.trans); err != nil {
		t.Fatal(err)
	}
}

func (n *node) stop(t *testing.T) {
	t.Helper()
	if err := n.raft.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	if err := n.store.Close(); err != nil {
		t.Fatal(err)
	}
	n.raft = nil
}

func connect(nodes []*node) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b && a.raft != nil && b.raft != nil {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

// waitFor polls cond until it holds, or fails the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func leaderOf(t *testing.T, nodes []*node) *node {
	t.Helper()
	var leader *node
	waitFor(t, 10*time.Second, "no leader elected", func() bool {
		for _, n := range nodes {
			if n.raft != nil && n.raft.State() == raft.Leader {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

// apply applies cmd-from..cmd-to (excluded) through the leader, and
// returns the leader. A command whose Apply fails because leadership moved
// is not acknowledged (it may still be committed) and is applied again
// through the new leader: it is recorded in retried.
func apply(t *testing.T, nodes []*node, from, to int, acked *[]string, retried map[string]bool) {
	t.Helper()
	for from < to {
		leader := leaderOf(t, nodes)
		futures := make([]raft.ApplyFuture, 0, to-from)
		for i := from; i < to; i++ {
			futures = append(futures, leader.raft.Apply([]byte(fmt.Sprintf("cmd-%04d", i)), 5*time.Second))
		}
		for i, f := range futures {
			cmd := fmt.Sprintf("cmd-%04d", from+i)
			err := f.Error()
			if err == raft.ErrLeadershipLost || err == raft.ErrNotLeader {
				t.Logf("Apply(%s) on %s: %v: applied again through the new leader", cmd, leader.id, err)
				for j := from + i; j < to; j++ {
					retried[fmt.Sprintf("cmd-%04d", j)] = true
				}
				from += i
				break
			}
			if err != nil {
				t.Fatalf("Apply(%s) on %s: %v", cmd, leader.id, err)
			}
			*acked = append(*acked, cmd)
			if i == len(futures)-1 {
				from = to
			}
		}
	}
}

// TestCluster: three raft nodes in one process on raft's InmemTransport,
// each with its own Store directory. Commands are applied, the leader is
// shut down, more are applied through the new leader, the old leader is
// restarted from its directory, and every node's FSM ends up with the same
// commands in the same order: every acknowledged one, once.
func TestCluster(t *testing.T) {
	base := t.TempDir()
	nodes := make([]*node, 3)
	var servers []raft.Server
	for i := range nodes {
		n := &node{id: raft.ServerID(fmt.Sprintf("node%d", i)), addr: raft.ServerAddress(fmt.Sprintf("addr%d", i)), dir: filepath.Join(base, fmt.Sprint(i))}
		nodes[i] = n
		servers = append(servers, raft.Server{ID: n.id, Address: n.addr})
	}
	for _, n := range nodes {
		n.start(t)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.raft != nil {
				_ = n.raft.Shutdown().Error()
				_ = n.store.Close()
			}
		}
	})
	connect(nodes)
	if err := nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}

	var acked []string
	retried := map[string]bool{}
	leader := leaderOf(t, nodes)
	apply(t, nodes, 0, 150, &acked, retried)

	old := leader
	for _, n := range nodes {
		if n != old {
			n.trans.Disconnect(old.addr)
		}
	}
	old.stop(t)
	leader = leaderOf(t, nodes)
	if leader == old {
		t.Fatal("the stopped node is still the leader")
	}
	apply(t, nodes, 150, 300, &acked, retried)

	old.start(t)
	connect(nodes)
	apply(t, nodes, 300, 320, &acked, retried)
	if err := leaderOf(t, nodes).raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}

	// Every node applies the leader's sequence. It holds every
	// acknowledged command, in the order acknowledged, and nothing twice
	// but a command applied again after a leadership change.
	ref := leaderOf(t, nodes)
	want := ref.fsm.list()
	seen := map[string]bool{}
	var firsts []string
	for _, c := range want {
		if seen[c] {
			if !retried[c] {
				t.Fatalf("%s applied twice, never applied again", c)
			}
			continue
		}
		seen[c] = true
		firsts = append(firsts, c)
	}
	if got, w := strings.Join(firsts, ","), strings.Join(acked, ","); got != w {
		t.Fatalf("the leader's FSM differs from the acknowledged commands:\n got %.300s\nwant %.300s", got, w)
	}
	for _, n := range nodes {
		waitFor(t, 15*time.Second, fmt.Sprintf("%s did not catch up", n.id), func() bool {
			return len(n.fsm.list()) >= len(want)
		})
		if got := n.fsm.list(); !slices.Equal(got, want) {
			t.Fatalf("%s holds %d commands that differ from the leader's %d:\n got %.300s\nwant %.300s",
				n.id, len(got), len(want), strings.Join(got, ","), strings.Join(want, ","))
		}
	}
	// Compaction ran: every store dropped its first entries.
	for _, n := range nodes {
		first, err := n.store.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		if first == 0 {
			// Empty: only when the node installed a snapshot of every
			// entry (raft then deletes its whole log: IsMonotonic).
			snap, _ := strconv.Atoi(n.raft.Stats()["last_snapshot_index"])
			if snap < len(acked) {
				t.Errorf("%s: empty store, last snapshot at %d", n.id, snap)
			}
			continue
		}
		if first == 1 {
			t.Errorf("%s: first index 1: no compaction happened", n.id)
		}
		// Every entry the store holds reads back with raft's term and type.
		last, _ := n.store.LastIndex()
		var e raft.Log
		for idx := first; idx <= last; idx++ {
			if err := n.store.GetLog(idx, &e); err != nil || e.Index != idx || e.Term == 0 {
				t.Fatalf("%s: GetLog(%d) = index %d term %d, %v", n.id, idx, e.Index, e.Term, err)
			}
			if e.Type == raft.LogCommand && !bytes.HasPrefix(e.Data, []byte("cmd-")) {
				t.Fatalf("%s: entry %d holds %q", n.id, idx, e.Data)
			}
		}
	}
}
