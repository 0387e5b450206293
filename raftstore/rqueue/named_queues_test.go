package rqueue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// applier methods on a named queue.

func (a *applier) sendTo(t *testing.T, name string, msgs ...Outgoing) uint64 {
	t.Helper()
	r := a.apply(t, encodeSendTo(name, msgs)).(SendResult)
	if r.Err != nil || r.N != len(msgs) {
		t.Fatalf("send to %s: %+v", name, r)
	}
	return r.First
}

func (a *applier) delFrom(t *testing.T, name string, ids ...uint64) int {
	t.Helper()
	r := a.apply(t, encodeDeleteFrom(name, ids)).(DeleteResult)
	if r.Err != nil {
		t.Fatalf("delete from %s: %v", name, r.Err)
	}
	return r.Deleted
}

func (a *applier) queueOp(t *testing.T, kind byte, name string) bool {
	t.Helper()
	r := a.apply(t, encodeQueueOp(kind, name)).(QueueResult)
	if r.Err != nil {
		t.Fatalf("queue op %d on %s: %v", kind, name, r.Err)
	}
	return r.Changed
}

func queueNames(qs []QueueStatus) []string {
	var out []string
	for _, q := range qs {
		out = append(out, fmt.Sprintf("%s:%d", q.Name, q.Messages))
	}
	return out
}

// Each queue of the FSM holds its own messages: a receive from one never
// hands out another's, a delete of an id under another queue deletes
// nothing, and a snapshot restores every queue as it was.
func TestFSMNamedQueuesAreIsolated(t *testing.T) {
	f := newFSM(t)
	a := &applier{f: f}
	d1 := a.send(t, Outgoing{Body: []byte("d1")})
	a1 := a.sendTo(t, "a", Outgoing{Body: []byte("a1")}, Outgoing{Body: []byte("a2"), Group: "g"})
	b1 := a.sendTo(t, "b", Outgoing{Body: []byte("b1")})
	if d1 != 1 || a1 != 2 || b1 != 4 {
		t.Fatalf("ids %d %d %d, want one sequence over the queues: 1 2 4", d1, a1, b1)
	}
	if got := queueNames(f.Queues()); !slices.Equal(got, []string{"a:2", "b:1", "default:1"}) {
		t.Fatalf("queues %v", got)
	}
	if n := a.delFrom(t, "b", a1); n != 0 {
		t.Fatalf("a delete of a's id under b deleted %d", n)
	}
	if n := a.delFrom(t, "nosuch", a1); n != 0 || slices.Contains(queueNames(f.Queues()), "nosuch:0") {
		t.Fatalf("a delete under a queue the FSM lacks deleted %d or made it", n)
	}
	if err := f.ChangeVisibilityIn("b", a1, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("visibility of a's id under b: %v", err)
	}
	want := digestOf(t, f)
	if want.Queues != 3 || want.Messages != 4 {
		t.Fatalf("digest %+v", want)
	}
	snap := snapshotOf(t, f)

	if got := receiveAllFrom(t, f, "a"); len(got) != 2 || got[a1] != "a1" || got[a1+1] != "a2" {
		t.Fatalf("a: %v", got)
	}
	if got := receiveAllFrom(t, f, "b"); len(got) != 1 || got[b1] != "b1" {
		t.Fatalf("b: %v", got)
	}
	if got := receiveAll(t, f); len(got) != 1 || got[d1] != "d1" {
		t.Fatalf("default: %v", got)
	}
	if n := a.delFrom(t, "a", a1, b1, d1); n != 1 {
		t.Fatalf("delete from a of a1, b1, d1: %d, want 1", n)
	}

	// A dropped queue is gone with its messages; one created again under
	// its name is empty, and ids go on from where they were.
	if !a.queueOp(t, cmdDropQueue, "b") || a.queueOp(t, cmdDropQueue, "b") {
		t.Fatal("drop b: want changed once")
	}
	if !a.queueOp(t, cmdCreateQueue, "b") || a.queueOp(t, cmdCreateQueue, "b") {
		t.Fatal("create b: want changed once")
	}
	if id := a.sendTo(t, "b", Outgoing{Body: []byte("b2")}); id != 5 {
		t.Fatalf("id after a drop %d, want 5", id)
	}
	if got := receiveAllFrom(t, f, "b"); len(got) != 1 || got[5] != "b2" {
		t.Fatalf("b created again: %v", got)
	}

	// The snapshot taken before holds every queue as it was then.
	dst := newFSM(t)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(t, dst); got != want {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
	if got := receiveAllFrom(t, dst, "b"); len(got) != 1 || got[b1] != "b1" {
		t.Fatalf("restored b: %v", got)
	}
	if got := receiveAllFrom(t, dst, "a"); len(got) != 2 || got[a1] != "a1" {
		t.Fatalf("restored a: %v", got)
	}
	if st := dst.Status(); st.NextID != 5 || st.Queues != 3 || st.Messages != 4 || st.InFlight != 3 {
		t.Fatalf("restored status %+v", st)
	}
}

// A receiver waiting on a queue the FSM lacks gets the message of the
// send that creates it; one waiting on a queue being dropped waits on.
func TestFSMReceiveWaitsForAQueueToBeCreated(t *testing.T) {
	f := newFSM(t)
	a := &applier{f: f}
	got := make(chan Message, 1)
	go func() {
		m, err := f.ReceiveFrom(context.Background(), "later")
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	id := a.sendTo(t, "later", Outgoing{Body: []byte("hello")})
	select {
	case m := <-got:
		if m.ID != id || string(m.Body) != "hello" {
			t.Fatalf("received %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver did not see the queue created")
	}

	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := f.ReceiveFrom(ctx, "later")
		done <- err
	}()
	a.queueOp(t, cmdDropQueue, "later")
	select {
	case err := <-done:
		t.Fatalf("a receiver of a dropped queue returned: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("receiver: %v, want context.Canceled", err)
	}

	// Close wakes a receiver waiting for a queue: ErrClosed.
	go func() {
		_, err := f.ReceiveFrom(context.Background(), "never")
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		f.mu.Lock()
		w := f.waiting
		f.mu.Unlock()
		if w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the receiver never waited for the queue")
		}
		time.Sleep(time.Millisecond)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("receiver of a missing queue at Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close left a receiver waiting for a queue")
	}
}

// Commands with a queue name the FSM refuses, or malformed, change
// nothing, alike on every node.
func TestFSMRefusesBadQueueNames(t *testing.T) {
	f := newFSM(t)
	a := &applier{f: f}
	for _, name := range []string{"", "a/b", "x.dead", string([]byte{0xff}), string(make([]byte, 256))} {
		if r := a.apply(t, encodeSendTo(name, []Outgoing{{Body: []byte("x")}})).(SendResult); !errors.Is(r.Err, queue.ErrBadQueueName) {
			t.Errorf("send to %q: %+v", name, r)
		}
		if r := a.apply(t, encodeQueueOp(cmdCreateQueue, name)).(QueueResult); !errors.Is(r.Err, queue.ErrBadQueueName) {
			t.Errorf("create %q: %+v", name, r)
		}
	}
	if r := a.apply(t, append(encodeQueueOp(cmdCreateQueue, "q"), 0)).(QueueResult); !errors.Is(r.Err, errBadCommand) {
		t.Errorf("create with a byte after it: %+v", r)
	}
	if r := a.apply(t, []byte{cmdSendTo, 5, 'a'}).(SendResult); !errors.Is(r.Err, errBadCommand) {
		t.Errorf("a name longer than the command: %+v", r)
	}
	if got := queueNames(f.Queues()); !slices.Equal(got, []string{"default:0"}) {
		t.Fatalf("queues %v", got)
	}
}

// A snapshot written before named queues (testdata/snapshot-v1.bin, of
// one queue: three sends of five messages, one with a group, one due in
// 2030, one binary, and a delete of id 2) restores into the default queue.
func TestFSMRestoresASnapshotOfOneQueue(t *testing.T) {
	snap, err := os.ReadFile("testdata/snapshot-v1.bin")
	if err != nil {
		t.Fatal(err)
	}
	f := newFSM(t)
	a := &applier{f: f}
	a.sendTo(t, "other", Outgoing{Body: []byte("gone by the restore")})
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := queueNames(f.Queues()); !slices.Equal(got, []string{"default:5"}) {
		t.Fatalf("queues %v", got)
	}
	if st := f.Status(); st.Applied != 6 || st.NextID != 7 || st.Messages != 5 {
		t.Fatalf("status %+v", st)
	}
	if addr := f.HTTPAddr("n1"); addr != "127.0.0.1:8001" {
		t.Fatalf("n1's address %q", addr)
	}
	got := receiveAll(t, f) // id 5 is due in 2030
	if len(got) != 4 || got[1] != "one" || got[3] != "three" || got[4] != "grouped" || got[6] != "\xff\x00\x01" {
		t.Fatalf("received %q", got)
	}
	if id := a.send(t, Outgoing{Body: []byte("next")}); id != 7 {
		t.Fatalf("next id %d, want 7", id)
	}
	// Damaged, it is refused as any snapshot.
	bad := bytes.Clone(snap)
	bad[len(bad)-10] ^= 1
	if err := f.Restore(io.NopCloser(bytes.NewReader(bad))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("damaged v1 snapshot: %v", err)
	}
}

// A snapshot whose queue sections are out of order, repeated, or whose
// messages come before any section is refused.
func TestFSMRestoreRefusesBadQueueSections(t *testing.T) {
	src := newFSM(t)
	a := &applier{f: src}
	a.sendTo(t, "a", Outgoing{Body: []byte("a")})
	snap := snapshotOf(t, src)
	// The sections, by name: "a" then "default". Swap the names' first
	// bytes' order by renaming "a" to "e" (after "default").
	i := bytes.Index(snap, []byte{snapSection, 1, 'a'})
	if i < 0 {
		t.Fatal("no section a")
	}
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"out of order", func(b []byte) []byte { b[i+2] = 'e'; return b }},
		{"message before a section", func(b []byte) []byte { b[i] = snapMessage; return b }},
		{"bad name", func(b []byte) []byte { b[i+2] = '/'; return b }},
	} {
		b := c.edit(bytes.Clone(snap))
		// Fix the CRC so that only the content is wrong.
		body := b[:len(b)-4]
		b = append(body, crc32BE(body)...)
		dst := newFSM(t)
		if err := dst.Restore(io.NopCloser(bytes.NewReader(b))); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v, want ErrBadSnapshot", c.name, err)
		}
		if got := queueNames(dst.Queues()); !slices.Equal(got, []string{"default:0"}) {
			t.Errorf("%s: the refused restore left queues %v", c.name, got)
		}
	}
}

// crc32BE is the CRC-32C of b, 4 bytes big-endian, as a snapshot ends.
func crc32BE(b []byte) []byte {
	return binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, castagnoli))
}

// Named queues replicate, and stay apart, across a leader change and a
// snapshot installed on a node that was away: every node ends with the
// same queues and messages, and the new leader hands out each queue's
// messages from that queue alone.
func TestClusterNamedQueuesAcrossLeaderChangeAndSnapshot(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := context.Background()
	sendTo := func(name, body string) (id uint64) {
		t.Helper()
		c.do(func(n *Node) (err error) {
			id, err = n.SendTo(ctx, name, []Outgoing{{Body: []byte(body)}})
			return err
		})
		return id
	}
	want := map[string]map[uint64]string{"default": {}, "a": {}, "b": {}}
	put := func(name, body string) { want[name][sendTo(name, body)] = body }
	for i := range 20 {
		put("a", fmt.Sprintf("a%d", i))
		put("b", fmt.Sprintf("b%d", i))
		put("default", fmt.Sprintf("d%d", i))
	}
	away := (c.leader() + 1) % 3
	c.stop(away)
	for i := 20; i < 200; i++ {
		put("a", fmt.Sprintf("a%d", i))
		if i%3 == 0 {
			put("b", fmt.Sprintf("b%d", i))
		}
	}
	// Deletes of a's ids under b delete nothing; under a they do.
	var aIDs []uint64
	for id := range want["a"] {
		aIDs = append(aIDs, id)
	}
	slices.Sort(aIDs)
	var k int
	c.do(func(n *Node) (err error) { k, err = n.DeleteFrom(ctx, "b", aIDs[:50]); return err })
	if k != 0 {
		t.Fatalf("a's ids deleted under b: %d", k)
	}
	c.do(func(n *Node) (err error) { k, err = n.DeleteFrom(ctx, "a", aIDs[:50]); return err })
	if k != 50 {
		t.Fatalf("a's ids deleted under a: %d, want 50", k)
	}
	for _, id := range aIDs[:50] {
		delete(want["a"], id)
	}
	var changed bool
	c.do(func(n *Node) (err error) { changed, err = n.CreateQueue(ctx, "empty"); return err })
	if !changed {
		t.Fatal("create empty: not created")
	}
	want["empty"] = map[uint64]string{}
	if err := c.nodes[c.leader()].Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c.start(away)
	c.converge()
	if restores(c.nodes[away].FSM()) == 0 {
		t.Fatal("the node that was away caught up without a snapshot installed")
	}
	// The leader changes.
	old := c.leader()
	c.stop(old)
	c.leader() // one of the two others
	c.start(old)
	d := c.converge()
	if d.Queues != 4 {
		t.Fatalf("digest %+v, want 4 queues", d)
	}
	var lists [][]string
	for _, n := range c.nodes {
		lists = append(lists, queueNames(n.Queues()))
	}
	for _, l := range lists[1:] {
		if !slices.Equal(l, lists[0]) {
			t.Fatalf("the nodes list different queues: %v", lists)
		}
	}
	for name, msgs := range want {
		got := map[uint64]string{}
		for {
			var m Message
			var err error
			c.do(func(n *Node) error {
				rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				m, err = n.ReceiveFrom(rctx, name)
				if errors.Is(err, context.DeadlineExceeded) {
					return nil
				}
				return err
			})
			if err != nil {
				break
			}
			got[m.ID] = string(m.Body)
		}
		if len(got) != len(msgs) {
			t.Fatalf("queue %s: %d messages handed out, want %d", name, len(got), len(msgs))
		}
		for id, b := range msgs {
			if got[id] != b {
				t.Fatalf("queue %s: message %d is %q, want %q", name, id, got[id], b)
			}
		}
	}
}

// The routes of a named queue, beside the routes of the default queue.
func TestHTTPNamedQueueRoutes(t *testing.T) {
	_, srv := oneNode(t)
	var ids struct{ IDs []uint64 }
	if c := call(t, srv, "POST", "/queues/orders/send", `{"body":"o1"}`, &ids); c != 200 || len(ids.IDs) != 1 || ids.IDs[0] != 1 {
		t.Fatalf("send to orders: %d %v", c, ids)
	}
	if c := call(t, srv, "POST", "/send", `{"messages":[{"body":"d1"},{"body":"d2"}]}`, &ids); c != 200 || ids.IDs[0] != 2 {
		t.Fatalf("send to the default queue: %d %v", c, ids)
	}
	// A name is percent-encoded as any path segment.
	if c := call(t, srv, "POST", "/queues/my%20queue/send", `{"body":"m1"}`, &ids); c != 200 || ids.IDs[0] != 4 {
		t.Fatalf("send to 'my queue': %d %v", c, ids)
	}
	var m received
	if c := call(t, srv, "POST", "/queues/orders/receive?wait=1s", "", &m); c != 200 || m.ID != 1 || *m.Body != "o1" {
		t.Fatalf("receive from orders: %d %+v", c, m)
	}
	if c := call(t, srv, "POST", "/queues/orders/receive?wait=50ms", "", nil); c != 204 {
		t.Fatalf("orders is empty: %d, want 204", c)
	}
	if c := call(t, srv, "POST", "/queues/nosuch/receive?wait=50ms", "", nil); c != 204 {
		t.Fatalf("a queue not yet created: %d, want 204", c)
	}
	if c := call(t, srv, "POST", "/receive", "", &m); c != 200 || m.ID != 2 {
		t.Fatalf("receive from the default queue: %d %+v", c, m)
	}
	if c := call(t, srv, "POST", "/queues/default/receive", "", &m); c != 200 || m.ID != 3 {
		t.Fatalf("the default queue by its name: %d %+v", c, m)
	}
	if c := call(t, srv, "POST", "/queues/orders/visibility", `{"id":1,"timeout":"0s"}`, nil); c != 200 {
		t.Fatalf("visibility in orders: %d", c)
	}
	if c := call(t, srv, "POST", "/queues/orders/visibility", `{"id":2,"timeout":"0s"}`, nil); c != 404 {
		t.Fatalf("visibility of the default queue's id in orders: %d, want 404", c)
	}
	var del struct{ Deleted int }
	if c := call(t, srv, "POST", "/queues/orders/delete", `{"ids":[1,2,3]}`, &del); c != 200 || del.Deleted != 1 {
		t.Fatalf("delete from orders: %d %+v", c, del)
	}
	var list struct{ Queues []QueueStatus }
	if c := call(t, srv, "GET", "/queues", "", &list); c != 200 || !slices.Equal(queueNames(list.Queues), []string{"default:2", "my queue:1", "orders:0"}) {
		t.Fatalf("GET /queues: %d %+v", c, list)
	}
	var qs QueueStatus
	if c := call(t, srv, "GET", "/queues/default", "", &qs); c != 200 || qs != (QueueStatus{Name: "default", Messages: 2, InFlight: 2}) {
		t.Fatalf("GET /queues/default: %d %+v", c, qs)
	}
	if c := call(t, srv, "GET", "/queues/nosuch", "", nil); c != 404 {
		t.Fatalf("GET of a queue the node lacks: %d, want 404", c)
	}
	var op map[string]bool
	if c := call(t, srv, "PUT", "/queues/new", "", &op); c != 200 || !op["created"] {
		t.Fatalf("PUT: %d %v", c, op)
	}
	if c := call(t, srv, "PUT", "/queues/new", "", &op); c != 200 || op["created"] {
		t.Fatalf("PUT again: %d %v", c, op)
	}
	if c := call(t, srv, "DELETE", "/queues/my%20queue", "", &op); c != 200 || !op["dropped"] {
		t.Fatalf("DELETE: %d %v", c, op)
	}
	if c := call(t, srv, "DELETE", "/queues/my%20queue", "", &op); c != 200 || op["dropped"] {
		t.Fatalf("DELETE again: %d %v", c, op)
	}
	if c := call(t, srv, "GET", "/queues", "", &list); c != 200 || !slices.Equal(queueNames(list.Queues), []string{"default:2", "new:0", "orders:0"}) {
		t.Fatalf("GET /queues after PUT and DELETE: %d %+v", c, list)
	}
	for _, path := range []string{"/queues/x.dead/send", "/queues/a%2Fb/send", "/queues/%FF/send"} {
		if c := call(t, srv, "POST", path, `{"body":"x"}`, nil); c != 400 {
			t.Errorf("POST %s: %d, want 400", path, c)
		}
	}
	for _, path := range []string{"/queues/x.dead/receive", "/queues/x.dead/delete"} {
		if c := call(t, srv, "POST", path, `{"ids":[1]}`, nil); c != 400 {
			t.Errorf("POST %s: %d, want 400", path, c)
		}
	}
	if c := call(t, srv, "PUT", "/queues/x.dead", "", nil); c != 400 {
		t.Errorf("PUT of a .dead name: %d, want 400", c)
	}
	var st NodeStatus
	if c := call(t, srv, "GET", "/status", "", &st); c != 200 || st.Queues != 3 || st.Messages != 2 || st.InFlight != 2 {
		t.Fatalf("status: %d %+v", c, st)
	}
}

// A snapshot of the default queue alone is written as version 1, which
// nodes of the version before named queues read; one more queue makes it
// version 2. Both restore as they were.
func TestFSMSnapshotOfTheDefaultQueueAloneIsVersion1(t *testing.T) {
	f := newFSM(t)
	a := &applier{f: f}
	a.send(t, Outgoing{Body: []byte("one")}, Outgoing{Body: []byte("two"), Group: "g"})
	for _, c := range []struct {
		magic string
		step  func()
	}{
		{snapMagicV1, func() {}},
		{snapMagic, func() { a.queueOp(t, cmdCreateQueue, "other") }},
		{snapMagic, func() { a.queueOp(t, cmdDropQueue, DefaultQueue) }},
		{snapMagic, func() { a.queueOp(t, cmdDropQueue, "other") }}, // no queue at all
	} {
		c.step()
		snap := snapshotOf(t, f)
		if got := string(snap[:len(c.magic)]); got != c.magic {
			t.Fatalf("queues %v: snapshot %q, want %q", queueNames(f.Queues()), got, c.magic)
		}
		dst := newFSM(t)
		if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatal(err)
		}
		if got, want := digestOf(t, dst), digestOf(t, f); got != want {
			t.Fatalf("queues %v: restored %+v, want %+v", queueNames(f.Queues()), got, want)
		}
	}
}
