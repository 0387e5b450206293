package rqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
	"github.com/pagelog/pagelog/raftstore"
)

// Config configures a Node.
type Config struct {
	// ID is the node's raft server id, unique in the cluster.
	ID string
	// Dir holds the node's files: raft/ (the raftstore: raft's log, term
	// and vote), snapshots/ (raft's file snapshot store) and queue/ (the
	// local queue, rebuilt at each start). The first Start records ID in
	// it; a later Start with another ID fails with ErrNodeIDChanged (a
	// directory with raft state and no recorded id takes ID, logged on
	// LogOutput).
	Dir string
	// RaftAddr is the host:port of raft's TCP transport, bound and
	// advertised. Ignored when Transport is set.
	RaftAddr string
	// Transport, when set, is used instead of a TCP transport (tests and
	// benchmarks: raft.NewInmemTransport).
	Transport raft.Transport
	// HTTPAddr is announced to the cluster once this node leads, so that
	// followers can name the leader's address ("" announces nothing).
	HTTPAddr string
	// Peers is the cluster's first configuration: with Bootstrap, a node
	// that has no raft state yet starts the cluster with it. Every node
	// may bootstrap with the same Peers.
	Peers     []raft.Server
	Bootstrap bool
	// CheckPeers, with Peers, makes Start fail with ErrPeersChanged for a
	// node that has raft state whose stored configuration is not Peers
	// (raft ignores Peers then: a node given new addresses would keep the
	// old ones and, when its own moved, never reach the others).
	CheckPeers bool
	// Queue configures the local queue (see NewFSM for what is refused).
	Queue queue.Options
	// Raft, when set, adjusts raft's configuration (timeouts, snapshot
	// threshold) after the defaults are filled in.
	Raft func(*raft.Config)
	// NoSync turns off the raftstore's fsyncs: for tests only.
	NoSync bool
	// LogOutput receives raft's log; nil means os.Stderr.
	LogOutput io.Writer
	// ApplyTimeout bounds how long a send or delete waits for raft to
	// take it; default 10 s.
	ApplyTimeout time.Duration
}

// Node is one member of a replicated queue: raft on a raftstore, and the
// FSM's local queue.
type Node struct {
	cfg   Config
	store *raftstore.Store
	trans raft.Transport
	fsm   *FSM
	raft  *raft.Raft

	notify  chan bool
	ready   atomic.Bool   // leader, and every entry of earlier terms applied
	gen     atomic.Uint64 // leadership changes seen
	stop    chan struct{}
	watch   sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

// NotLeaderError is returned for an operation sent to a node that does not
// lead (or does not lead yet: a new leader first applies what earlier
// leaders committed). The fields name the leader when it is known.
type NotLeaderError struct {
	LeaderID, LeaderRaft, LeaderHTTP string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "rqueue: not the leader (no leader known)"
	}
	return fmt.Sprintf("rqueue: not the leader (the leader is %s at %s)", e.LeaderID, e.LeaderRaft)
}

// Is makes errors.Is(err, raft.ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == raft.ErrNotLeader }

// Start opens the node's store and starts raft. It returns without waiting
// for a leader.
func Start(c Config) (*Node, error) {
	if c.ID == "" || c.Dir == "" {
		return nil, errors.New("rqueue: Config.ID and Config.Dir are required")
	}
	if c.ApplyTimeout == 0 {
		c.ApplyTimeout = 10 * time.Second
	}
	logOut := c.LogOutput
	if logOut == nil {
		logOut = os.Stderr
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("rqueue: %w", err)
	}
	n := &Node{cfg: c, notify: make(chan bool, 8), stop: make(chan struct{})}
	started := false
	defer func() {
		if !started {
			_ = n.release()
		}
	}()
	var err error
	// The store first: its lock keeps a second node off the directory
	// before NewFSM removes the local queue.
	if n.store, err = raftstore.Open(filepath.Join(c.Dir, "raft"), raftstore.Options{NoSync: c.NoSync}); err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStore(c.Dir, 2, logOut)
	if err != nil {
		return nil, err
	}
	has, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		return nil, err
	}
	// The node id before anything else reads or changes the directory:
	// raft's term and vote there count for the node that cast them.
	if err := checkNodeID(n.store, c.Dir, c.ID, has, logOut); err != nil {
		return nil, err
	}
	if n.fsm, err = NewFSM(filepath.Join(c.Dir, "queue"), c.Queue); err != nil {
		return nil, err
	}
	n.trans = c.Transport
	if n.trans == nil {
		addr, err := net.ResolveTCPAddr("tcp", c.RaftAddr)
		if err != nil {
			return nil, fmt.Errorf("rqueue: raft address %q: %w", c.RaftAddr, err)
		}
		if n.trans, err = raft.NewTCPTransport(c.RaftAddr, addr, 3, 10*time.Second, logOut); err != nil {
			return nil, err
		}
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(c.ID)
	conf.LogOutput = logOut
	conf.NotifyCh = n.notify
	if c.Raft != nil {
		c.Raft(conf)
	}
	conf.NotifyCh = n.notify
	if c.Bootstrap {
		if !has {
			peers := c.Peers
			if len(peers) == 0 {
				peers = []raft.Server{{ID: conf.LocalID, Address: n.trans.LocalAddr()}}
			}
			err := raft.BootstrapCluster(conf, n.store, n.store, snaps, n.trans, raft.Configuration{Servers: peers})
			if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
				return nil, err
			}
		}
	}
	if n.raft, err = raft.NewRaft(conf, n.fsm, n.store, n.store, snaps, n.trans); err != nil {
		return nil, err
	}
	if has && c.CheckPeers && len(c.Peers) > 0 {
		// NewRaft read the configuration from the snapshot and the log;
		// no election starts before a heartbeat timeout.
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			_ = n.raft.Shutdown().Error()
			return nil, err
		}
		if err := checkPeers(c.Dir, f.Configuration().Servers, c.Peers); err != nil {
			_ = n.raft.Shutdown().Error()
			return nil, err
		}
	}
	started = true
	n.watch.Add(1)
	go n.watchLeadership()
	return n, nil
}

// watchLeadership keeps ready: set once this node leads and a barrier
// has applied every entry committed before, cleared when it stops leading.
func (n *Node) watchLeadership() {
	defer n.watch.Done()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-n.notify:
			g := n.gen.Add(1)
			n.ready.Store(false)
			if !leader {
				continue
			}
			n.watch.Add(1)
			go func() {
				defer n.watch.Done()
				if n.raft.Barrier(n.cfg.ApplyTimeout).Error() != nil || n.gen.Load() != g {
					return
				}
				n.ready.Store(true)
				if n.cfg.HTTPAddr != "" && n.fsm.HTTPAddr(n.cfg.ID) != n.cfg.HTTPAddr {
					_ = n.raft.Apply(encodeAnnounce(n.cfg.ID, n.cfg.HTTPAddr), n.cfg.ApplyTimeout).Error()
				}
			}()
		}
	}
}

// leading returns nil when this node may serve, else a NotLeaderError.
func (n *Node) leading() error {
	if n.ready.Load() && n.raft.State() == raft.Leader {
		return nil
	}
	return n.notLeader()
}

func (n *Node) notLeader() error {
	addr, id := n.raft.LeaderWithID()
	e := &NotLeaderError{LeaderID: string(id), LeaderRaft: string(addr)}
	if id != "" {
		e.LeaderHTTP = n.fsm.HTTPAddr(string(id))
	}
	return e
}

// apply runs cmd through raft and returns the FSM's response.
func (n *Node) apply(ctx context.Context, cmd []byte) (any, error) {
	if err := n.leading(); err != nil {
		return nil, err
	}
	timeout := n.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	f := n.raft.Apply(cmd, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return nil, n.notLeader()
		}
		return nil, err
	}
	return f.Response(), nil
}

// Send sends msgs to the default queue (SendTo).
func (n *Node) Send(ctx context.Context, msgs []Outgoing) (uint64, error) {
	return n.SendTo(ctx, DefaultQueue, msgs)
}

// SendTo sends msgs to the queue name through raft and returns the first
// one's id (they get consecutive ids). A queue the cluster lacks is
// created by the send. It returns once the send is committed (on a
// quorum's disks) and applied to this node's queue. An error other than a
// NotLeaderError or a refusal of the content (engine.ErrTooLarge,
// engine.ErrInvalidAttrs for a bad group, engine.ErrBadOptions for a due
// time more than queue.MaxDelay ahead, queue.ErrBadQueueName) leaves the
// outcome unknown: the send may yet be committed.
func (n *Node) SendTo(ctx context.Context, name string, msgs []Outgoing) (uint64, error) {
	if err := CheckQueueName(name); err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	if err := n.fsm.check(msgs); err != nil {
		return 0, err
	}
	limit := time.Now().Add(queue.MaxDelay).UnixMilli()
	for i, m := range msgs {
		if m.Due < 0 || m.Due > limit {
			return 0, fmt.Errorf("%w: rqueue: message %d: due time %d out of range (now to %v ahead)", engine.ErrBadOptions, i, m.Due, queue.MaxDelay)
		}
	}
	resp, err := n.apply(ctx, encodeSendTo(name, msgs))
	if err != nil {
		return 0, err
	}
	r, _ := resp.(SendResult)
	return r.First, r.Err
}

// Delete deletes the messages ids of the default queue (DeleteFrom).
func (n *Node) Delete(ctx context.Context, ids []uint64) (int, error) {
	return n.DeleteFrom(ctx, DefaultQueue, ids)
}

// DeleteFrom deletes the messages ids of the queue name through raft,
// whatever their state, and returns how many of them were live messages
// of that queue (an id of another queue is not deleted). Once it
// returns, no node hands them out again.
func (n *Node) DeleteFrom(ctx context.Context, name string, ids []uint64) (int, error) {
	if err := CheckQueueName(name); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	resp, err := n.apply(ctx, encodeDeleteFrom(name, ids))
	if err != nil {
		return 0, err
	}
	r, _ := resp.(DeleteResult)
	return r.Deleted, r.Err
}

// CreateQueue creates the queue name, empty, through raft, and reports
// whether it was created (false: the cluster had it).
func (n *Node) CreateQueue(ctx context.Context, name string) (bool, error) {
	return n.queueOp(ctx, cmdCreateQueue, name)
}

// DropQueue drops the queue name and its messages through raft, and
// reports whether the cluster had it. Its receivers waiting on the leader
// wait on as for an empty queue; a later send creates it again, empty.
// Ids are never reused: one of the dropped queue's names no message.
func (n *Node) DropQueue(ctx context.Context, name string) (bool, error) {
	return n.queueOp(ctx, cmdDropQueue, name)
}

func (n *Node) queueOp(ctx context.Context, kind byte, name string) (bool, error) {
	if err := CheckQueueName(name); err != nil {
		return false, err
	}
	resp, err := n.apply(ctx, encodeQueueOp(kind, name))
	if err != nil {
		return false, err
	}
	r, _ := resp.(QueueResult)
	return r.Changed, r.Err
}

// Receive hands out a message of the default queue (ReceiveFrom).
func (n *Node) Receive(ctx context.Context) (Message, error) {
	return n.ReceiveFrom(ctx, DefaultQueue)
}

// ReceiveFrom hands out a message from the leader's queue name and hides
// it until its deadline, which lives on this node only: if leadership
// moves, the message is ready again on the new leader (at-least-once). It
// blocks until a message is ready or ctx is done (a queue the cluster
// lacks is waited on as an empty one). A node that does not lead returns
// a NotLeaderError.
func (n *Node) ReceiveFrom(ctx context.Context, name string) (Message, error) {
	if err := CheckQueueName(name); err != nil {
		return Message{}, err
	}
	if err := n.leading(); err != nil {
		return Message{}, err
	}
	g := n.gen.Load()
	// Stop waiting when leadership is lost.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if n.gen.Load() != g {
					cancel()
					return
				}
			}
		}
	}()
	m, err := n.fsm.ReceiveFrom(ctx, name)
	if err == nil && (n.gen.Load() != g || n.raft.State() != raft.Leader) {
		_ = n.fsm.ChangeVisibilityIn(name, m.ID, 0)
		return Message{}, n.notLeader()
	}
	if err != nil && n.gen.Load() != g {
		return Message{}, n.notLeader()
	}
	return m, err
}

// ChangeVisibility moves the deadline of a message of the default queue
// (ChangeVisibilityIn).
func (n *Node) ChangeVisibility(id uint64, d time.Duration) error {
	return n.ChangeVisibilityIn(DefaultQueue, id, d)
}

// ChangeVisibilityIn moves the deadline of a message of the queue name
// that this leader handed out to d from now (0: ready at once).
func (n *Node) ChangeVisibilityIn(name string, id uint64, d time.Duration) error {
	if err := n.leading(); err != nil {
		return err
	}
	return n.fsm.ChangeVisibilityIn(name, id, d)
}

// Queues returns this node's queues, by name (what it has applied: a
// follower may lag the leader).
func (n *Node) Queues() []QueueStatus { return n.fsm.Queues() }

// NodeStatus is what a node knows of itself and the cluster.
type NodeStatus struct {
	ID          string `json:"id"`
	State       string `json:"state"` // Leader, Follower, Candidate, Shutdown
	Ready       bool   `json:"ready"` // leads, and serves receives
	LeaderID    string `json:"leader_id"`
	LeaderRaft  string `json:"leader_raft"`
	LeaderHTTP  string `json:"leader_http,omitempty"`
	Applied     uint64 `json:"applied"`
	NextID      uint64 `json:"next_id"`
	Messages    int    `json:"messages"`  // over every queue
	InFlight    int    `json:"in_flight"` // over every queue
	Queues      int    `json:"queues"`
	LastIndex   uint64 `json:"last_index"`
	CommitIndex uint64 `json:"commit_index"`
	Failed      string `json:"failed,omitempty"`
}

// Status returns the node's state.
func (n *Node) Status() NodeStatus {
	addr, id := n.raft.LeaderWithID()
	fs := n.fsm.Status()
	st := NodeStatus{
		ID: n.cfg.ID, State: n.raft.State().String(), Ready: n.leading() == nil,
		LeaderID: string(id), LeaderRaft: string(addr), LeaderHTTP: n.fsm.HTTPAddr(string(id)),
		Applied: fs.Applied, NextID: fs.NextID, Messages: fs.Messages, InFlight: fs.InFlight, Queues: fs.Queues,
		LastIndex: n.raft.LastIndex(), CommitIndex: n.raft.CommitIndex(),
	}
	if fs.Failed != nil {
		st.Failed = fs.Failed.Error()
	}
	return st
}

// Digest returns the digest of the node's messages (FSM.Digest).
func (n *Node) Digest() (Digest, error) { return n.fsm.Digest() }

// Raft returns the node's raft, for membership changes and tests.
func (n *Node) Raft() *raft.Raft { return n.raft }

// FSM returns the node's FSM.
func (n *Node) FSM() *FSM { return n.fsm }

// Close shuts raft down, then closes the queue, the store and the
// transport. A second Close returns ErrClosed.
func (n *Node) Close() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return ErrClosed
	}
	n.closed = true
	var errs []error
	if n.raft != nil {
		errs = append(errs, n.raft.Shutdown().Error())
	}
	close(n.stop)
	n.watch.Wait()
	return errors.Join(append(errs, n.release())...)
}

// release closes what Start opened.
func (n *Node) release() error {
	var errs []error
	if n.fsm != nil {
		errs = append(errs, n.fsm.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	if c, ok := n.trans.(io.Closer); ok && n.cfg.Transport == nil {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
