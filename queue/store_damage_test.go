package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// appendStoreRecords appends bodies to the store log sub of the closed
// store in dir, as damage or a foreign writer would leave them.
func appendStoreRecords(t *testing.T, dir, sub string, bodies ...[]byte) {
	t.Helper()
	l, err := engine.Open(filepath.Join(dir, sub), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		if _, err := l.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// storeOfOneMessage makes a store in dir whose queue "a" holds the
// message "a0", closes it and returns a's id.
func storeOfOneMessage(t *testing.T, dir string) uint32 {
	t.Helper()
	s := openTestStore(t, dir, StoreOptions{})
	if _, err := mustQueue(t, s, "a").Send([]byte("a0")); err != nil {
		t.Fatal(err)
	}
	id := storeQueueID(t, s, "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return id
}

func storeQueueID(t *testing.T, s *Store, name string) uint32 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	sq := s.byName[name]
	if sq == nil {
		t.Fatalf("no queue %q", name)
	}
	return sq.id
}

// A names record that creates an id a name already holds is damage: the
// second name never gets the first's messages, and the first keeps them.
func TestStoreNamesRecordNamingAnIDTwiceKeepsMessagesInTheirQueue(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	a := mustQueue(t, s, "a")
	if _, err := a.Send([]byte("of a")); err != nil {
		t.Fatal(err)
	}
	id := storeQueueID(t, s, "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	appendStoreRecords(t, dir, storeNamesDir, encodeName(nameCreate, id, "b"))

	s = openTestStore(t, dir, StoreOptions{})
	if len(s.Recovery().Damaged) == 0 {
		t.Error("a second creation of one id is not reported damaged")
	}
	b := mustQueue(t, s, "b")
	if m, ok, _ := b.TryReceive(); ok {
		t.Fatalf("queue b hands out %q, a message sent to a", m.Body)
	}
	if _, err := b.Send([]byte("of b")); err != nil {
		t.Fatal(err)
	}
	a = mustQueue(t, s, "a")
	if _, body := receiveBody(t, a); body != "of a" {
		t.Fatalf("a hands out %q, want its own message", body)
	}
	if m, ok, _ := a.TryReceive(); ok {
		t.Fatalf("a hands out %q too", m.Body)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, StoreOptions{})
	a = mustQueue(t, s, "a")
	if _, body := receiveBody(t, a); body != "of a" {
		t.Fatalf("after reopen a hands out %q, want its own message", body)
	}
	if m, ok, _ := a.TryReceive(); ok {
		t.Fatalf("after reopen a hands out %q too", m.Body)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A heads record of an id no queue holds (its create lost, or foreign)
// never becomes the head of a queue created later: that queue's messages
// below the record's head would count as deleted.
func TestStoreHeadsRecordOfUnknownIDIsNeverANewQueuesHead(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreOptions{})
	mustQueue(t, s, "a")
	next := storeQueueID(t, s, "a") + 1
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32(nil, next)
	body = append(body, encodeHead(headState{head: 5, end: 5, sides: true})...)
	appendStoreRecords(t, dir, storeHeadsDir, body)

	clock := NewManualClock(time.Unix(1e9, 0)) // no checkpoint runs
	s = openTestStore(t, dir, StoreOptions{Clock: clock, Log: engine.Options{Sync: engine.SyncAlways}})
	b := mustQueue(t, s, "b")
	for i := range 3 {
		if _, err := b.Send(fmt.Appendf(nil, "b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	crashed := t.TempDir()
	testkit.MustCopyDir(t, dir, crashed, true) // a crash: no Close, no checkpoint
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, crashed, StoreOptions{})
	defer s.Close()
	b = mustQueue(t, s, "b")
	for i := range 3 {
		if _, body := receiveBody(t, b); body != fmt.Sprintf("b%d", i) {
			t.Fatalf("b hands out %q, want b%d", body, i)
		}
	}
}

// A record of the message log whose queue attribute names an offset far
// past its queue's end (a foreign writer) is stepped over, reported, and
// costs neither a hang nor memory for the offsets it skips.
func TestStoreRecordWithFarQueueOffsetIsDamage(t *testing.T) {
	dir := t.TempDir()
	id := storeOfOneMessage(t, dir)
	l, err := engine.Open(filepath.Join(dir, storeMessagesDir), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []uint64{1 << 40, 1<<64 - 1} {
		if _, err := l.AppendWith([]byte("far"), &engine.Attrs{HasQueue: true, Queue: id, QueueOffset: off}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	a := mustQueue(t, s, "a")
	if _, body := receiveBody(t, a); body != "a0" {
		t.Fatalf("a hands out %q, want a0", body)
	}
	if m, ok, _ := a.TryReceive(); ok {
		t.Fatalf("a hands out %q at %d", m.Body, m.Offset)
	}
	if off, err := a.Send([]byte("a1")); err != nil || off > 1<<20 {
		t.Fatalf("Send after the far records = %d, %v", off, err)
	}
}

// A head record whose end lies far past its queue's records (a forged
// record: a power failure loses far fewer) fails the queue's open with a
// clear error instead of a map of every offset skipped.
func TestStoreHeadFarPastItsQueueIsAClearError(t *testing.T) {
	dir := t.TempDir()
	id := storeOfOneMessage(t, dir)
	body := binary.BigEndian.AppendUint32(nil, id)
	body = append(body, encodeHead(headState{end: 1 << 40, sides: true})...)
	appendStoreRecords(t, dir, storeHeadsDir, body)
	s := openTestStore(t, dir, StoreOptions{})
	defer s.Close()
	if _, err := s.Queue("a"); !errors.Is(err, engine.ErrCorrupt) {
		t.Fatalf("Queue of a queue whose head lies far past it = %v, want ErrCorrupt", err)
	}
}

// A crash inside DeleteQueue after the queue's delete record and before
// its dead-letter queue's: the dead letters go with their queue, and a
// queue created again under the name starts with no dead letters.
func TestStoreDeleteQueueCutBeforeItsDeadLettersStartsTheNameEmpty(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	o := StoreOptions{MaxReceives: 1, Visibility: time.Second, Clock: clock}
	s := openTestStore(t, dir, o)
	a := mustQueue(t, s, "a")
	if _, err := a.Send([]byte("old")); err != nil {
		t.Fatal(err)
	}
	receiveBody(t, a)
	clock.Advance(2 * time.Second)
	waitFor(t, "the move to the dead letters", func() bool { return a.DeadLetter().Stats().Messages == 1 })
	id := storeQueueID(t, s, "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	appendStoreRecords(t, dir, storeNamesDir, encodeName(nameDelete, id, ""))

	s = openTestStore(t, dir, o)
	defer s.Close()
	if got := s.Names(); len(got) != 0 {
		t.Fatalf("Names after the cut DeleteQueue = %q, want none", got)
	}
	a = mustQueue(t, s, "a")
	if m, ok, _ := a.DeadLetter().TryReceive(); ok {
		t.Fatalf("a queue created again under a deleted name has the old dead letter %q", m.Body)
	}
}
