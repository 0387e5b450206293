package rqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/queue"
)

func newFSM(t *testing.T) *FSM {
	t.Helper()
	f, err := NewFSM(filepath.Join(t.TempDir(), "queue"), queue.Options{Visibility: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// applier feeds commands to an FSM with increasing raft indexes.
type applier struct {
	f     *FSM
	index uint64
}

func (a *applier) apply(t *testing.T, data []byte) any {
	t.Helper()
	a.index++
	return a.f.Apply(&raft.Log{Index: a.index, Term: 1, Type: raft.LogCommand, Data: data})
}

func (a *applier) send(t *testing.T, msgs ...Outgoing) uint64 {
	t.Helper()
	r := a.apply(t, encodeSend(msgs)).(SendResult)
	if r.Err != nil || r.N != len(msgs) {
		t.Fatalf("send: %+v", r)
	}
	return r.First
}

func (a *applier) del(t *testing.T, ids ...uint64) int {
	t.Helper()
	r := a.apply(t, encodeDelete(ids)).(DeleteResult)
	if r.Err != nil {
		t.Fatalf("delete: %v", r.Err)
	}
	return r.Deleted
}

// def returns the FSM's default queue. Called with f.mu held.
func (f *FSM) def() *fsmQueue { return f.queues[DefaultQueue] }

func body(i int) []byte { return []byte(fmt.Sprintf("message %d %s", i, strings.Repeat("x", i%50))) }

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

func snapshotOf(t *testing.T, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var sink memSink
	if err := s.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v (closed %v)", err, sink.closed)
	}
	return sink.Bytes()
}

func digestOf(t *testing.T, f *FSM) Digest {
	t.Helper()
	d, err := f.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func receiveAll(t *testing.T, f *FSM) map[uint64]string {
	t.Helper()
	return receiveAllFrom(t, f, DefaultQueue)
}

// receiveAllFrom receives every ready message of the queue name.
func receiveAllFrom(t *testing.T, f *FSM, name string) map[uint64]string {
	t.Helper()
	got := map[uint64]string{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		m, err := f.ReceiveFrom(ctx, name)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := got[m.ID]; dup {
			t.Fatalf("message %d of %s handed out twice", m.ID, name)
		}
		got[m.ID] = string(m.Body)
	}
}

func TestFSMApplyAndReceive(t *testing.T) {
	f := newFSM(t)
	a := &applier{f: f}
	first := a.send(t, Outgoing{Body: body(0)}, Outgoing{Body: body(1)}, Outgoing{Body: body(2), Group: "g"})
	if first != 1 {
		t.Fatalf("first id %d, want 1", first)
	}
	if n := a.send(t, Outgoing{Body: body(3)}); n != 4 {
		t.Fatalf("id %d, want 4", n)
	}
	if k := a.del(t, 2, 2, 99); k != 1 {
		t.Fatalf("deleted %d, want 1 (2 once; 99 was never sent)", k)
	}
	if k := a.del(t, 2); k != 0 {
		t.Fatalf("deleted again: %d", k)
	}
	got := receiveAll(t, f)
	want := map[uint64]string{1: string(body(0)), 3: string(body(2)), 4: string(body(3))}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	// Deleting a message in flight works; its neighbours stay.
	if k := a.del(t, 3); k != 1 {
		t.Fatalf("deleted %d", k)
	}
	if err := f.ChangeVisibility(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.ChangeVisibility(3, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("visibility of a deleted message: %v", err)
	}
	if got := receiveAll(t, f); len(got) != 1 || got[1] != string(body(0)) {
		t.Fatalf("after release: %v", got)
	}
	st := f.Status()
	if st.Applied != a.index || st.NextID != 5 || st.Messages != 2 {
		t.Fatalf("status %+v", st)
	}
}

func TestFSMRefusesBadCommands(t *testing.T) {
	f := newFSM(t)
	a := &applier{f: f}
	a.send(t, Outgoing{Body: body(1)})
	before := digestOf(t, f)
	for _, data := range [][]byte{
		{cmdSend, 5},          // a count beyond the data
		{cmdSend, 1, 0, 0, 9}, // a body beyond the data
		{cmdDelete, 2, 1},     // a count beyond the data
		{99},                  // unknown
		append(encodeSend([]Outgoing{{Body: body(2)}}), 0), // trailing byte
		encodeSend([]Outgoing{{Body: body(2)}, {Body: body(3), Group: strings.Repeat("g", queue.MaxIDBytes+1)}}),
		encodeSend([]Outgoing{{Body: make([]byte, f.max+1)}}),
	} {
		switch r := a.apply(t, data).(type) {
		case SendResult:
			if r.Err == nil {
				t.Fatalf("%x: applied", data)
			}
		case DeleteResult:
			if r.Err == nil {
				t.Fatalf("%x: applied", data)
			}
		case error:
		default:
			t.Fatalf("%x: response %v", data, r)
		}
	}
	after := digestOf(t, f)
	if after.SHA256 != before.SHA256 || after.NextID != before.NextID || after.Messages != 1 {
		t.Fatalf("a refused command changed the FSM: %+v, was %+v", after, before)
	}
	// Every truncation of valid commands is refused, never a panic.
	for _, data := range [][]byte{
		encodeSend([]Outgoing{{Body: body(7), Due: time.Now().UnixMilli(), Group: "grp"}}),
		encodeDelete([]uint64{1, 1 << 60}),
		encodeAnnounce("n1", "127.0.0.1:1"),
	} {
		for i := 1; i < len(data); i++ {
			switch data[0] {
			case cmdSend:
				if _, err := decodeSend(data[1:i]); err == nil {
					t.Fatalf("truncated send %x decoded", data[:i])
				}
			case cmdDelete:
				if _, err := decodeDelete(data[1:i]); err == nil {
					t.Fatalf("truncated delete %x decoded", data[:i])
				}
			case cmdAnnounce:
				if _, _, err := decodeAnnounce(data[1:i]); err == nil {
					t.Fatalf("truncated announce %x decoded", data[:i])
				}
			}
		}
	}
}

func TestFSMSnapshotRestore(t *testing.T) {
	src := newFSM(t)
	a := &applier{f: src}
	now := time.Now()
	for i := range 300 {
		m := Outgoing{Body: body(i)}
		switch i % 7 {
		case 1:
			m.Group = fmt.Sprintf("g%d", i%3)
		case 2:
			m.Due = now.Add(time.Hour).UnixMilli()
		case 3:
			m.Body = nil // empty bodies are messages too
		}
		a.send(t, m)
	}
	for id := uint64(1); id <= 300; id += 3 {
		a.del(t, id)
	}
	a.apply(t, encodeAnnounce("n1", "127.0.0.1:8001"))
	snap := snapshotOf(t, src)
	want := digestOf(t, src)
	if want.Messages != 200 {
		t.Fatalf("%d messages, want 200", want.Messages)
	}

	dst := newFSM(t)
	b := &applier{f: dst}
	b.send(t, Outgoing{Body: []byte("replaced by the restore")})
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(t, dst); got != want {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
	if dst.HTTPAddr("n1") != "127.0.0.1:8001" {
		t.Fatal("announce lost in the snapshot")
	}
	// Both apply the same commands after it and stay equal; ids go on.
	for _, x := range []*applier{a, {f: dst, index: a.index}} {
		if id := x.send(t, Outgoing{Body: []byte("after")}); id != 301 {
			t.Fatalf("id after restore %d, want 301", id)
		}
		if k := x.del(t, 2, 5, 301); k != 3 {
			t.Fatalf("deleted %d, want 3", k)
		}
	}
	if got, want := digestOf(t, dst), digestOf(t, src); got != want {
		t.Fatalf("after more commands: %+v, want %+v", got, want)
	}
	// The restored queue hands out what the source would: not the delayed
	// messages, one per group (none is deleted), never a deleted one.
	hand := map[uint64]string{}
	groups := map[string]bool{}
	for i := range 300 {
		id := uint64(i + 1)
		if i%3 == 0 || id == 2 || id == 5 || i%7 == 2 {
			continue
		}
		if g := fmt.Sprintf("g%d", i%3); i%7 == 1 {
			if groups[g] {
				continue
			}
			groups[g] = true
		}
		hand[id] = string(body(i))
		if i%7 == 3 {
			hand[id] = ""
		}
	}
	if got := receiveAll(t, dst); fmt.Sprint(got) != fmt.Sprint(hand) {
		t.Fatalf("handed out %d messages, hand %d:\n%v\n%v", len(got), len(hand), got, hand)
	}
}

func TestFSMRestoreRefusesDamage(t *testing.T) {
	src := newFSM(t)
	a := &applier{f: src}
	for i := range 20 {
		a.send(t, Outgoing{Body: body(i), Group: "g"})
	}
	snap := snapshotOf(t, src)
	dst := newFSM(t)
	b := &applier{f: dst}
	b.send(t, Outgoing{Body: []byte("kept")})
	want := digestOf(t, dst)
	try := func(name string, data []byte) {
		t.Helper()
		if err := dst.Restore(io.NopCloser(bytes.NewReader(data))); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: %v, want ErrBadSnapshot", name, err)
		}
		if got := digestOf(t, dst); got != want {
			t.Fatalf("%s: the FSM changed: %+v", name, got)
		}
	}
	for _, n := range []int{0, 5, len(snapMagic) + 1, len(snap) / 2, len(snap) - 5, len(snap) - 1} {
		try(fmt.Sprintf("truncated to %d", n), snap[:n])
	}
	for _, i := range []int{len(snapMagic) + 1, len(snap) / 2, len(snap) - 3} {
		bad := bytes.Clone(snap)
		bad[i] ^= 0x40
		try(fmt.Sprintf("byte %d flipped", i), bad)
	}
	try("a byte after", append(bytes.Clone(snap), 0))
	if got := dst.Status(); got.NextID != 2 {
		t.Fatalf("next id %d", got.NextID)
	}
}

// A snapshot taken while deletes and sends go on holds the messages live
// when it was taken, less those deleted since; replaying the commands
// after it gives the source's state.
func TestFSMSnapshotBesideApplies(t *testing.T) {
	src := newFSM(t)
	a := &applier{f: src}
	for i := range 500 {
		a.send(t, Outgoing{Body: body(i)})
	}
	s, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	at := a.index
	var later [][]byte
	done := make(chan error, 1)
	var sink memSink
	go func() { done <- s.Persist(&sink) }()
	for i := 0; i < 500; i += 2 {
		cmd := encodeDelete([]uint64{uint64(i + 1)})
		if i%10 == 0 {
			cmd = encodeSend([]Outgoing{{Body: body(1000 + i)}})
		}
		later = append(later, cmd)
		a.apply(t, cmd)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.Release()
	dst := newFSM(t)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if st := dst.Status(); st.Applied != at || st.NextID != 501 {
		t.Fatalf("restored %+v", st)
	}
	b := &applier{f: dst, index: at}
	for _, cmd := range later {
		b.apply(t, cmd)
	}
	if got, want := digestOf(t, dst), digestOf(t, src); got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
}

// Restore and Close race a receiver blocked in Receive: it moves to the
// new queue, then gets ErrClosed.
func TestFSMReceiveAcrossRestoreAndClose(t *testing.T) {
	src := newFSM(t)
	(&applier{f: src}).send(t, Outgoing{Body: []byte("from the snapshot")})
	snap := snapshotOf(t, src)
	f := newFSM(t)
	got := make(chan any, 2)
	go func() {
		m, err := f.Receive(context.Background())
		got <- string(m.Body)
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if b := <-got; b != "from the snapshot" || <-got != nil {
		t.Fatalf("received %v", b)
	}
	go func() {
		_, err := f.Receive(context.Background())
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err, _ := (<-got).(error); !errors.Is(err, ErrClosed) {
		t.Fatalf("receive after close: %v", err)
	}
	if r := f.Apply(&raft.Log{Index: 9, Type: raft.LogCommand, Data: encodeSend([]Outgoing{{Body: []byte("x")}})}).(SendResult); !errors.Is(r.Err, ErrClosed) {
		t.Fatalf("apply after close: %+v", r)
	}
	if err := f.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

// Raft may hold a snapshot while its main loop waits for a Restore: the
// Restore must not wait for the snapshot, whose Persist still reads the
// replaced queue's files, removed once it is released.
func TestFSMRestoreWhileSnapshotHeld(t *testing.T) {
	f := newFSM(t)
	a := &applier{f: f}
	for i := range 50 {
		a.send(t, Outgoing{Body: body(i)})
	}
	want := digestOf(t, f)
	held, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	oldDir := f.sdir

	other := newFSM(t)
	(&applier{f: other}).send(t, Outgoing{Body: []byte("other")})
	done := make(chan error, 1)
	go func() { done <- f.Restore(io.NopCloser(bytes.NewReader(snapshotOf(t, other)))) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Restore waits for a snapshot held")
	}
	if digestOf(t, f) != digestOf(t, other) {
		t.Fatal("not restored")
	}
	var sink memSink
	if err := held.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(oldDir); err != nil {
		t.Fatalf("the replaced queue went before its snapshot was released: %v", err)
	}
	held.Release()
	held.Release() // twice changes nothing
	if _, err := os.Stat(oldDir); !os.IsNotExist(err) {
		t.Fatalf("the replaced queue stays after the release: %v", err)
	}
	check := newFSM(t)
	if err := check.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(t, check); got != want {
		t.Fatalf("the held snapshot: %+v, want %+v", got, want)
	}
}

// A local queue that fails to apply a command stops the FSM serving
// (ErrFailed) rather than let it diverge from the others; a snapshot
// installed rebuilds it.
func TestFSMFailedQueue(t *testing.T) {
	f := newFSM(t)
	a := &applier{f: f}
	a.send(t, Outgoing{Body: []byte("one")})
	if err := f.queues[DefaultQueue].q.Close(); err != nil { // the queue fails under the FSM
		t.Fatal(err)
	}
	r := a.apply(t, encodeSend([]Outgoing{{Body: []byte("two")}})).(SendResult)
	if !errors.Is(r.Err, ErrFailed) {
		t.Fatalf("send on a failed queue: %+v", r)
	}
	if d := a.apply(t, encodeDelete([]uint64{1})).(DeleteResult); !errors.Is(d.Err, ErrFailed) {
		t.Fatalf("delete on a failed queue: %+v", d)
	}
	if _, err := f.Receive(context.Background()); !errors.Is(err, ErrFailed) {
		t.Fatalf("receive: %v", err)
	}
	if err := f.ChangeVisibility(1, 0); !errors.Is(err, ErrFailed) {
		t.Fatalf("visibility: %v", err)
	}
	if _, err := f.Digest(); !errors.Is(err, ErrFailed) {
		t.Fatalf("digest: %v", err)
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrFailed) {
		t.Fatalf("snapshot of a failed FSM: %v", err)
	}
	if st := f.Status(); st.Failed == nil || st.NextID != 2 {
		t.Fatalf("status %+v", st)
	}
	src := newFSM(t)
	b := &applier{f: src}
	b.send(t, Outgoing{Body: []byte("one")}, Outgoing{Body: []byte("two")})
	if err := f.Restore(io.NopCloser(bytes.NewReader(snapshotOf(t, src)))); err != nil {
		t.Fatal(err)
	}
	if got, want := digestOf(t, f), digestOf(t, src); got != want {
		t.Fatalf("after the restore: %+v, want %+v", got, want)
	}
	if got := receiveAll(t, f); len(got) != 2 || got[2] != "two" {
		t.Fatalf("received %v", got)
	}
}
