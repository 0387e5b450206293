package queue

import (
	"github.com/pagelog/pagelog/internal/tmpfstest"

	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// fullDiskTmpfs mounts a tmpfs of size MiB and returns the queue directory
// in it (its dead-letter queue, the sibling, lies on it too) and the mount.
func fullDiskTmpfs(t *testing.T, size int) (dir, fsdir string) {
	t.Helper()
	fsdir = tmpfstest.Mount(t, fmt.Sprintf("%dm", size))
	return filepath.Join(fsdir, "q"), fsdir
}

// idBody is the body of message id: its id first, then bytes derived
// from it, size bytes in all.
func idBody(id, size int) []byte {
	b := make([]byte, size)
	copy(b, fmt.Sprintf("m%07d:", id))
	for i := 9; i < size; i++ {
		b[i] = byte(i*131 + id*7)
	}
	return b
}

// bodyID returns the id of a body made by idBody, -1 when it is not one.
func bodyID(b []byte) int {
	var id int
	if len(b) < 9 {
		return -1
	}
	if _, err := fmt.Sscanf(string(b[:9]), "m%07d:", &id); err != nil {
		return -1
	}
	if !bytes.Equal(b, idBody(id, len(b))) {
		return -1
	}
	return id
}

// ackModel is what a queue was told and answered.
type ackModel struct {
	size    int
	sent    map[int]uint64 // id -> offset: Send returned nil
	offID   map[uint64]int
	deleted map[int]bool // Delete returned nil
	next    int          // the next id
}

func newAckModel(size int) *ackModel {
	return &ackModel{size: size, sent: map[int]uint64{}, offID: map[uint64]int{}, deleted: map[int]bool{}}
}

// send sends one message; it reports the error (a full disk's).
func (m *ackModel) send(q *Queue) error {
	id := m.next
	m.next++
	off, err := q.Send(idBody(id, m.size))
	if err == nil {
		m.sent[id] = off
		m.offID[off] = id
	}
	return err
}

// del deletes the message at off; it reports the error.
func (m *ackModel) del(q *Queue, off uint64) error {
	err := q.Delete(off)
	if err == nil {
		m.deleted[m.offID[off]] = true
	}
	return err
}

// drainIDs receives every ready message of q and returns their ids (in
// order), failing on a body that was never sent or a damaged record.
func drainIDs(t *testing.T, q *Queue) []int {
	t.Helper()
	var ids []int
	for {
		msg, ok, err := q.TryReceive()
		if !ok {
			if err != nil {
				t.Fatalf("TryReceive: %v", err)
			}
			return ids
		}
		if err != nil {
			t.Fatalf("message %d: %v", msg.Offset, err)
		}
		id := bodyID(msg.Body)
		if id < 0 {
			t.Fatalf("message %d: a body that was never sent (%d bytes, %q...)", msg.Offset, len(msg.Body), msg.Body[:min(len(msg.Body), 12)])
		}
		ids = append(ids, id)
	}
}

// check drains q and its dead letters, opened after a restart: every
// message sent and not deleted is in one of them; no deleted one is
// handed out by q; q hands out none twice.
func (m *ackModel) check(t *testing.T, q *Queue) {
	t.Helper()
	src := drainIDs(t, q)
	// Messages found with their receives used up (at the open, or by the
	// drain) move to the dead letters by a timer: wait for the moves.
	for deadline := time.Now().Add(time.Minute); q.Stats().Dying > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("messages still waiting to move to the dead letters after a minute: %+v", q.Stats())
		}
	}
	var dead []int
	if d := q.DeadLetter(); d != nil {
		dead = drainIDs(t, d)
	}
	seen := map[int]bool{}
	for _, id := range src {
		if seen[id] {
			t.Errorf("message %d handed out twice after the restart", id)
		}
		seen[id] = true
		if m.deleted[id] {
			t.Errorf("message %d, whose Delete returned nil, is handed out again after the restart (offset %d)", id, m.sent[id])
		}
	}
	for _, id := range dead {
		seen[id] = true
	}
	var lost []int
	for id := range m.sent {
		if !m.deleted[id] && !seen[id] {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	if len(lost) > 0 {
		t.Errorf("%d messages sent (acknowledged) and never deleted are in neither the queue nor its dead letters after the restart: %v", len(lost), lost[:min(len(lost), 20)])
	}
	t.Logf("after the restart: %d in the queue, %d in the dead letters; %d sent, %d deleted", len(src), len(dead), len(m.sent), len(m.deleted))
}

// fullDiskVariant is one configuration of the full-disk runs.
type fullDiskVariant struct {
	name        string
	sync        engine.SyncPolicy
	maxReceives int
}

func fullDiskVariants() []fullDiskVariant {
	return []fullDiskVariant{
		{"none", engine.SyncNone, 0},
		{"none-dead", engine.SyncNone, 2},
		{"interval-dead", engine.SyncInterval, 2},
		{"always", engine.SyncAlways, 0},
		{"always-dead", engine.SyncAlways, 2},
	}
}

func (v fullDiskVariant) options(o *Options) {
	o.Log = engine.Options{SegmentBytes: 1 << 20, Sync: v.sync, SyncInterval: time.Millisecond}
	o.CheckpointInterval = time.Millisecond
	o.Clock = nil
	o.MaxReceives = v.maxReceives
	o.Visibility = time.Hour
}

// TestQueueFullDiskRoundsKeepAcknowledged: a queue on a tmpfs, with
// messages in flight and, with MaxReceives, moves to the dead letters. The
// disk is filled, then the queue deletes, releases (moves), receives and
// sends on the full disk; then space is freed, taken again, and so on for a
// few rounds. Every call either works or says why; Close, and the restart
// after it, keep every delete that returned nil and every send
// acknowledged.
func TestQueueFullDiskRoundsKeepAcknowledged(t *testing.T) {
	for _, v := range fullDiskVariants() {
		t.Run(v.name, func(t *testing.T) {
			fullDiskRounds(t, v, 3)
		})
	}
}

func fullDiskRounds(t *testing.T, v fullDiskVariant, rounds int) {
	dir, fsdir := fullDiskTmpfs(t, 32)
	q := openTestQueue(t, dir, newFakeClock(), v.options)
	m := newAckModel(4000)
	for range 1500 { // about 6 segments
		if err := m.send(q); err != nil {
			t.Fatal(err)
		}
	}
	type held struct {
		off uint64
		id  int
	}
	var inFlight []held
	receiveAll := func(must bool) int {
		n := 0
		for {
			msg, ok, err := q.TryReceive()
			if !ok {
				if err != nil && must {
					t.Fatalf("TryReceive: %v", err)
				}
				return n
			}
			if err != nil {
				t.Fatalf("TryReceive of %d: %v", msg.Offset, err)
			}
			id := bodyID(msg.Body)
			if id < 0 {
				t.Fatalf("received %d: a body never sent", msg.Offset)
			}
			if m.deleted[id] {
				t.Fatalf("received %d (message %d) after its Delete returned nil", msg.Offset, id)
			}
			inFlight = append(inFlight, held{msg.Offset, id})
			n++
		}
	}
	receiveAll(true)
	// Delete most: the checkpoints drop the segments behind the head.
	rest := inFlight[:0]
	for i, h := range inFlight {
		if i < 1300 {
			if err := m.del(q, h.off); err != nil {
				t.Fatal(err)
			}
			continue
		}
		rest = append(rest, h)
	}
	inFlight = rest
	waitFor(t, "the segments behind the head dropped", func() bool {
		h, err := readHead(dir)
		return err == nil && h.head == inFlight[0].off
	})
	released := map[uint64]int{} // releases of a message in flight
	var ballast string
	for round := range rounds {
		ballast = fillTmpfs(t, fsdir)
		// On the full disk: deletes of the oldest messages (the head
		// moves), releases (a message released once, received again
		// and released again has used up MaxReceives 2: it moves to
		// the dead letters), receives, sends.
		slices.SortFunc(inFlight, func(a, b held) int { return cmp.Compare(a.off, b.off) })
		var errs []error
		rest := inFlight[:0]
		for i, h := range inFlight {
			switch {
			case released[h.off] == 1 || i >= 20 && i < 30:
				if err := q.Release(h.off); err != nil {
					errs = append(errs, fmt.Errorf("release: %w", err))
					rest = append(rest, h)
				}
				released[h.off]++
			case i < 20:
				if err := m.del(q, h.off); err != nil {
					errs = append(errs, fmt.Errorf("delete: %w", err))
					rest = append(rest, h)
				}
			default:
				rest = append(rest, h)
			}
		}
		inFlight = rest
		receiveAll(false)
		for range 5 {
			if err := m.send(q); err != nil {
				errs = append(errs, fmt.Errorf("send: %w", err))
			}
		}
		receiveAll(false)
		for _, err := range errs {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("round %d on a full disk: %v, want nil or an error wrapping ENOSPC", round, err)
			}
		}
		t.Logf("round %d: %d calls failed on the full disk", round, len(errs))
		// The head checkpoint follows the head, unless the queue's own
		// logs hold no spare file to give it room.
		want := q.Stats().Head
		var h headState
		var herr error
		for deadline := time.Now().Add(500 * time.Millisecond); ; time.Sleep(time.Millisecond) {
			h, herr = readHead(dir)
			if herr == nil && h.head == want {
				break
			}
			if time.Now().After(deadline) {
				if own := ownSpareFiles(dir); len(own) > 0 {
					t.Errorf("round %d: no head checkpoint at %d on the full disk in 0.5 s while the queue's logs hold spare files %v: queue.head %+v, %v; checkpoint error %v",
						round, want, own, h, herr, q.Stats().CheckpointError)
				}
				break
			}
		}
		t.Logf("round %d: queue.head %+v (%v), head %d; checkpoint error %v", round, h, herr, want, q.Stats().CheckpointError)
		if round == rounds-1 {
			break // Close on the full disk
		}
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		// Space again: sends fill the room the drops made.
		for range 200 {
			if err := m.send(q); err != nil {
				t.Fatalf("send with space: %v", err)
			}
		}
		receiveAll(true)
	}
	spares := ownSpareFiles(dir)
	closeErr := q.Close()
	t.Logf("Close on the full disk: %v", closeErr)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	q = openTestQueue(t, dir, newFakeClock(), v.options)
	defer mustCloseQueue(t, q)
	m.check(t, q)
	if closeErr != nil && len(spares) > 0 {
		t.Errorf("Close on the full disk failed with spare files to give it space (%v): %v", spares, closeErr)
	}
}

// logQueueFiles logs the files of the queue's directories with the blocks
// each takes.
func logQueueFiles(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{dir, filepath.Join(dir, deletesDir), filepath.Join(dir, receivesDir), DeadLetterPath(dir)} {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		var b bytes.Buffer
		for _, e := range ents {
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join(d, e.Name()), &st) == nil && !e.IsDir() {
				fmt.Fprintf(&b, " %s:%dK/%dK", e.Name(), st.Blocks/2, st.Size>>10)
			}
		}
		t.Logf("%s:%s", d, b.String())
	}
}

// spareFiles lists the spare files (kept for reuse, prepared) of the
// queue's logs and of its dead letters' logs.
func spareFiles(dir string) []string {
	var out []string
	for _, d := range []string{dir, filepath.Join(dir, deletesDir), filepath.Join(dir, receivesDir), DeadLetterPath(dir),
		filepath.Join(DeadLetterPath(dir), deletesDir)} {
		for _, pat := range []string{"recycled-*", "prepared.log"} {
			m, _ := filepath.Glob(filepath.Join(d, pat))
			out = append(out, m...)
		}
	}
	return out
}

// ownSpareFiles lists the spare files of the queue's own logs (its message,
// delete and receive-count logs), not its dead letters'.
func ownSpareFiles(dir string) []string {
	var out []string
	for _, d := range []string{dir, filepath.Join(dir, deletesDir), filepath.Join(dir, receivesDir)} {
		for _, pat := range []string{"recycled-*", "prepared.log"} {
			m, _ := filepath.Glob(filepath.Join(d, pat))
			out = append(out, m...)
		}
	}
	return out
}
