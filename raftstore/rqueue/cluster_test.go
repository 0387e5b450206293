package rqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/queue"
	"github.com/pagelog/pagelog/raftstore"
)

// testRaft makes raft quick and snapshot often, so that compaction and
// snapshot installs happen while the tests run.
func testRaft(c *raft.Config) {
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotThreshold = 64
	c.SnapshotInterval = 100 * time.Millisecond
	c.TrailingLogs = 32
}

type testCluster struct {
	t     *testing.T
	dir   string
	nodes []*Node // nil when stopped
	trans []*raft.InmemTransport
	peers []raft.Server
}

func newTestCluster(t *testing.T, n int) *testCluster {
	c := &testCluster{t: t, dir: t.TempDir(), nodes: make([]*Node, n), trans: make([]*raft.InmemTransport, n)}
	for i := range n {
		c.peers = append(c.peers, raft.Server{ID: raft.ServerID(c.id(i)), Address: raft.ServerAddress(c.id(i))})
	}
	for i := range n {
		c.start(i)
	}
	t.Cleanup(func() {
		for i, n := range c.nodes {
			if n != nil {
				if err := n.Close(); err != nil {
					t.Errorf("close %s: %v", c.id(i), err)
				}
			}
		}
	})
	return c
}

func (c *testCluster) id(i int) string { return fmt.Sprintf("n%d", i+1) }

func (c *testCluster) start(i int) {
	c.t.Helper()
	_, tr := raft.NewInmemTransport(raft.ServerAddress(c.id(i)))
	c.trans[i] = tr
	for j, o := range c.trans {
		if j != i && o != nil {
			tr.Connect(o.LocalAddr(), o)
			o.Connect(tr.LocalAddr(), tr)
		}
	}
	logf, err := os.OpenFile(filepath.Join(c.dir, c.id(i)+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { logf.Close() })
	n, err := Start(Config{
		ID: c.id(i), Dir: filepath.Join(c.dir, c.id(i)), Transport: tr,
		HTTPAddr: "http-" + c.id(i), Peers: c.peers, Bootstrap: true,
		Queue: queue.Options{Visibility: 5 * time.Second}, Raft: testRaft,
		NoSync: true, LogOutput: logf,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[i] = n
}

func (c *testCluster) stop(i int) {
	c.t.Helper()
	for j, o := range c.trans {
		if j != i && o != nil {
			o.Disconnect(c.trans[i].LocalAddr())
		}
	}
	c.trans[i].DisconnectAll()
	if err := c.nodes[i].Close(); err != nil {
		c.t.Fatal(err)
	}
	c.nodes[i], c.trans[i] = nil, nil
}

// leader waits for a node that serves.
func (c *testCluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for i, n := range c.nodes {
			if n != nil && n.leading() == nil {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader within a minute")
	return -1
}

// do runs op on the leader until it does not fail for want of one.
func (c *testCluster) do(op func(n *Node) error) {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := op(c.nodes[c.leader()])
		var nl *NotLeaderError
		if !errors.As(err, &nl) || time.Now().After(deadline) {
			if err != nil {
				c.t.Fatal(err)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *testCluster) send(msgs ...Outgoing) (id uint64) {
	c.t.Helper()
	c.do(func(n *Node) (err error) { id, err = n.Send(context.Background(), msgs); return err })
	return id
}

func (c *testCluster) del(ids ...uint64) (k int) {
	c.t.Helper()
	c.do(func(n *Node) (err error) { k, err = n.Delete(context.Background(), ids); return err })
	return k
}

func (c *testCluster) receive(wait time.Duration) (m Message) {
	c.t.Helper()
	c.do(func(n *Node) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		var err error
		m, err = n.Receive(ctx)
		return err
	})
	return m
}

// converge waits until every running node applied the same index and
// holds the same messages.
func (c *testCluster) converge() Digest {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var ds []Digest
		for _, n := range c.nodes {
			if n != nil {
				d, err := n.Digest()
				if err != nil {
					c.t.Fatal(err)
				}
				ds = append(ds, d)
			}
		}
		same := true
		for _, d := range ds[1:] {
			same = same && d == ds[0]
		}
		if same {
			return ds[0]
		}
		if time.Now().After(deadline) {
			for i := range c.nodes {
				b, _ := os.ReadFile(filepath.Join(c.dir, c.id(i)+".log"))
				c.t.Logf("%s's log (the end):\n%s", c.id(i), b[max(0, len(b)-4000):])
			}
			c.t.Fatalf("the nodes differ after a minute: %+v", ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClusterFailover(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := context.Background()
	sent := map[uint64]string{}
	for i := range 200 {
		b := fmt.Sprintf("m%d", i)
		sent[c.send(Outgoing{Body: []byte(b)})] = b
	}
	c.converge()
	l := c.leader()
	for j, n := range c.nodes {
		if j == l {
			continue
		}
		_, err := n.Send(ctx, []Outgoing{{Body: []byte("x")}})
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.LeaderID != c.id(l) || !errors.Is(err, raft.ErrNotLeader) {
			t.Fatalf("send on follower %s: %v", c.id(j), err)
		}
		if _, err := n.Receive(ctx); !errors.As(err, &nl) {
			t.Fatalf("receive on follower: %v", err)
		}
	}
	// Receive 100, delete 60 of them: 40 stay in flight on the leader.
	deleted := map[uint64]bool{}
	for k := range 100 {
		m, err := c.nodes[l].Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sent[m.ID] != string(m.Body) {
			t.Fatalf("received %d %q, sent %q", m.ID, m.Body, sent[m.ID])
		}
		if k < 60 {
			if n, err := c.nodes[l].Delete(ctx, []uint64{m.ID}); err != nil || n != 1 {
				t.Fatalf("delete %d: %d %v", m.ID, n, err)
			}
			deleted[m.ID] = true
		}
	}
	before := c.converge()
	if before.Messages != 140 {
		t.Fatalf("%d messages, want 140", before.Messages)
	}
	if ann := c.nodes[(l+1)%3].Status().LeaderHTTP; ann != "http-"+c.id(l) {
		t.Fatalf("followers know the leader's HTTP address as %q", ann)
	}

	// The leader goes; the new one hands out every message not deleted,
	// those in flight on the old leader included (at-least-once).
	c.stop(l)
	got := map[uint64]bool{}
	for len(got) < 140 {
		m := c.receive(2 * time.Second)
		if deleted[m.ID] || sent[m.ID] != string(m.Body) {
			t.Fatalf("new leader handed out %d %q (deleted %v)", m.ID, m.Body, deleted[m.ID])
		}
		got[m.ID] = true
	}
	// More traffic through the new leader, enough for snapshots.
	for i := range 150 {
		id := c.send(Outgoing{Body: []byte(fmt.Sprintf("late%d", i))}, Outgoing{Body: []byte("pair")})
		if k := c.del(id + 1); k != 1 {
			t.Fatalf("deleted %d", k)
		}
	}
	// The old leader comes back from its directory and catches up.
	c.start(l)
	d := c.converge()
	if d.Messages != 140+150 || d.NextID != 201+300 {
		t.Fatalf("after catching up: %+v", d)
	}
	if st := c.nodes[l].Status(); st.State != "Follower" || st.Messages != d.Messages {
		t.Fatalf("restarted node: %+v", st)
	}
}

// A node far behind gets the leader's snapshot installed (its log was
// compacted past it) and ends with the same messages.
func TestClusterSnapshotInstall(t *testing.T) {
	c := newTestCluster(t, 3)
	f := (c.leader() + 1) % 3
	c.stop(f)
	for i := range 300 {
		id := c.send(Outgoing{Body: []byte(fmt.Sprintf("a%d", i))}, Outgoing{Body: []byte(fmt.Sprintf("b%d", i)), Group: "g"})
		if i%2 == 0 {
			c.del(id)
		}
	}
	if err := c.nodes[c.leader()].Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c.start(f)
	d := c.converge()
	if d.Messages != 450 {
		t.Fatalf("%+v", d)
	}
	if restores(c.nodes[f].FSM()) == 0 {
		t.Fatal("the restarted node caught up without a snapshot installed")
	}
}

// restores returns how many snapshots f installed.
func restores(f *FSM) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen
}

// A second node on a directory in use fails with ErrLocked and leaves the
// first one's files alone.
func TestNodeDirectoryInUse(t *testing.T) {
	n, _ := oneNode(t)
	id, err := n.Send(context.Background(), []Outgoing{{Body: []byte("kept")}})
	if err != nil {
		t.Fatal(err)
	}
	_, tr := raft.NewInmemTransport("other")
	if _, err := Start(Config{ID: "other", Dir: n.cfg.Dir, Transport: tr, LogOutput: io.Discard, NoSync: true}); !errors.Is(err, raftstore.ErrLocked) {
		t.Fatalf("second Start: %v, want ErrLocked", err)
	}
	d, err := n.Digest()
	if err != nil || d.Messages != 1 {
		t.Fatalf("the first node after the second Start: %+v, %v", d, err)
	}
	m, err := n.Receive(context.Background())
	if err != nil || m.ID != id || string(m.Body) != "kept" {
		t.Fatalf("receive: %+v %v", m, err)
	}
	if _, err := Start(Config{Dir: t.TempDir()}); err == nil {
		t.Fatal("Start without an ID")
	}
}
