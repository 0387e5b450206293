package rqueue

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/queue"
)

// A snapshot holds the FSM's counters and its queues' live messages, not
// the log:
//
//	magic    "PLRQSNP2"
//	uv applied index, uv next id, uv count, count x (bytes node id, bytes HTTP address)
//	per queue, by name: byte 2, bytes name, then
//	    per live message, in id order: byte 1, uv id, uv due (Unix ms, 0: none), bytes group, bytes body
//	byte 0, uv number of queues, uv number of messages
//	CRC-32C (Castagnoli) of all the above, 4 bytes big-endian
//
// (uv: unsigned varint; bytes: uv length, then the bytes.) The version
// before named queues, "PLRQSNP1", has the same header, the messages
// (byte 1, ...) with no queue section, byte 0, uv number of messages, the
// CRC-32C: its messages are the default queue's, the only queue it holds.
// Restore reads both; Snapshot writes version 1 when the FSM holds the
// default queue alone (so that nodes of an older version read it).
const (
	snapMagic   = "PLRQSNP2"
	snapMagicV1 = "PLRQSNP1"
)

// The kinds of a snapshot's items.
const (
	snapEnd     = 0
	snapMessage = 1
	snapSection = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadSnapshot: Restore was given bytes that are not a whole snapshot
// of this package. The FSM is left as it was.
var ErrBadSnapshot = errors.New("rqueue: damaged snapshot")

type snapshot struct {
	f       *FSM
	sdir    string
	queues  []snapQueue // by name
	next    uint64
	applied uint64
	http    map[string]string
	resume  func() // lets the local store's checkpoints drop segments again
	release sync.Once
}

// snapQueue is a queue as a snapshot took it.
type snapQueue struct {
	name  string
	pairs [][2]uint64 // (local offset, id) of the live messages, by offset
}

// Snapshot captures every queue's name and its live messages' ids and
// local offsets; Persist reads their bodies from the local store's files.
// A message deleted between the two is left out: every node that
// installs the snapshot applies that delete after it.
//
// Nothing a snapshot holds makes Restore wait: raft may hold a snapshot
// while its main loop waits for a Restore to end.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stopped(); err != nil {
		return nil, err
	}
	f.reading[f.sdir]++
	qs := make([]snapQueue, 0, len(f.queues))
	for _, name := range slices.Sorted(maps.Keys(f.queues)) {
		qs = append(qs, snapQueue{name: name, pairs: f.queues[name].live()})
	}
	// Until Release, the store's checkpoints remove no segment: Persist
	// reads the live messages from the store's files while moves copy
	// held messages to the end of the log, and a checkpoint that dropped
	// a moved message's original or copy during the read would leave the
	// message out of the snapshot.
	return &snapshot{f: f, sdir: f.sdir, queues: qs, next: f.next, applied: f.applied, http: maps.Clone(f.http),
		resume: f.store.PauseDrops()}, nil
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {
	s.release.Do(func() {
		s.resume()
		s.f.doneReading(s.sdir)
	})
}

// doneReading ends a snapshot's read of dir, and removes dir if Restore
// replaced it and no other snapshot reads it.
func (f *FSM) doneReading(dir string) {
	f.mu.Lock()
	f.reading[dir]--
	remove := f.reading[dir] == 0 && f.retired[dir]
	if f.reading[dir] == 0 {
		delete(f.reading, dir)
		delete(f.retired, dir)
	}
	f.mu.Unlock()
	if remove {
		_ = os.RemoveAll(dir)
	}
}

func (s *snapshot) write(w io.Writer) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 1<<16)
	// The default queue alone is written as version 1, which a node of
	// an older version reads: a cluster that uses no other queue may mix
	// versions while it upgrades.
	v1 := len(s.queues) == 1 && s.queues[0].name == DefaultQueue
	b := []byte(snapMagic)
	if v1 {
		b = []byte(snapMagicV1)
	}
	b = binary.AppendUvarint(b, s.applied)
	b = binary.AppendUvarint(b, s.next)
	b = binary.AppendUvarint(b, uint64(len(s.http)))
	for id, addr := range s.http {
		b = appendBytes(b, []byte(id))
		b = appendBytes(b, []byte(addr))
	}
	bw.Write(b)
	var r *queue.StoreReader
	defer func() {
		if r != nil {
			r.Close()
		}
	}()
	n := uint64(0)
	for _, sq := range s.queues {
		if !v1 {
			b = appendBytes(append(b[:0], snapSection), []byte(sq.name))
			bw.Write(b)
		}
		if len(sq.pairs) == 0 {
			continue
		}
		if r == nil {
			var err error
			if r, err = queue.ReadStore(s.sdir); err != nil {
				return fmt.Errorf("rqueue: snapshot: %w", err)
			}
		}
		k, err := writeQueue(bw, r, sq)
		if err != nil {
			return err
		}
		n += k
	}
	b = append(b[:0], snapEnd)
	if !v1 {
		b = binary.AppendUvarint(b, uint64(len(s.queues)))
	}
	b = binary.AppendUvarint(b, n)
	bw.Write(b)
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

// writeQueue writes the messages of sq that r holds, and returns how many.
func writeQueue(w io.Writer, r *queue.StoreReader, sq snapQueue) (uint64, error) {
	i, n := 0, uint64(0)
	var b []byte
	var err error
	rerr := r.Messages(sq.name, func(m queue.Stored) bool {
		for i < len(sq.pairs) && sq.pairs[i][0] < m.Offset {
			i++ // deleted since the snapshot was taken
		}
		if i == len(sq.pairs) {
			return false
		}
		if sq.pairs[i][0] != m.Offset {
			return true // sent after the snapshot was taken
		}
		if m.Err != nil {
			err = fmt.Errorf("rqueue: snapshot: queue %q: message %d (offset %d): %w", sq.name, sq.pairs[i][1], m.Offset, m.Err)
			return false
		}
		b = append(b[:0], snapMessage)
		b = appendMessage(b, sq.pairs[i][1], m)
		_, err = w.Write(b)
		i++
		n++
		return err == nil
	})
	if rerr != nil {
		return n, fmt.Errorf("rqueue: snapshot: queue %q: %w", sq.name, rerr)
	}
	return n, err
}

// crcReader reads through a bufio.Reader and sums what it reads.
type crcReader struct {
	r   *bufio.Reader
	crc hash.Hash32
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.crc.Write([]byte{b})
	}
	return b, err
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc.Write(p[:n])
	return n, err
}

func (c *crcReader) uv() (uint64, error) { return binary.ReadUvarint(c) }

func (c *crcReader) bytes(max int) ([]byte, error) {
	n, err := c.uv()
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, fmt.Errorf("%w: a length of %d, at most %d", ErrBadSnapshot, n, max)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(c, b)
	return b, err
}

// restoreBatch is how many bytes of bodies Restore sends at a time.
const restoreBatch = 4 << 20

// Restore replaces the FSM's store with the snapshot's queues and
// messages: a new store directory is filled, and swapped in once the
// whole snapshot has been read and checked. A receiver blocked in Receive
// moves to the new store's queue; messages in flight on this node are
// ready again.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.Lock()
	closed, gen := f.closed, f.gen+1
	f.mu.Unlock()
	if closed {
		return ErrClosed
	}
	s, sdir, err := f.openGen(gen)
	if err != nil {
		return err
	}
	st, err := f.readSnapshot(&crcReader{r: bufio.NewReaderSize(rc, 1<<16), crc: crc32.New(castagnoli)}, s)
	if err != nil {
		_ = s.Close()
		_ = os.RemoveAll(sdir)
		return err
	}
	f.mu.Lock()
	old, oldDir := f.store, f.sdir
	f.store, f.sdir, f.gen = s, sdir, gen
	f.queues = st.queues
	f.next, f.applied, f.http = st.next, st.applied, st.http
	f.failed = nil
	f.changedNow()
	f.mu.Unlock()
	// The old store is no longer the FSM's: its errors change nothing. A
	// snapshot still reading its files removes them when it is released.
	_ = old.Close()
	f.mu.Lock()
	remove := f.reading[oldDir] == 0
	f.retired[oldDir] = !remove
	f.mu.Unlock()
	if remove {
		_ = os.RemoveAll(oldDir)
	}
	return nil
}

type restored struct {
	queues        map[string]*fsmQueue
	next, applied uint64
	http          map[string]string
}

// snapReader reads a snapshot's items into a store.
type snapReader struct {
	f      *FSM
	c      *crcReader
	s      *queue.Store
	st     restored
	fq     *fsmQueue // the queue being filled
	batch  []Outgoing
	ids    []uint64
	size   int
	last   uint64 // the last id of the queue being filled
	n      uint64 // messages read
	queues uint64 // queue sections read
}

func (f *FSM) readSnapshot(c *crcReader, s *queue.Store) (restored, error) {
	sr := &snapReader{f: f, c: c, s: s, st: restored{queues: map[string]*fsmQueue{}, http: map[string]string{}}}
	st, err := sr.read()
	if err != nil && !errors.Is(err, ErrBadSnapshot) {
		err = fmt.Errorf("rqueue: restore: %w", err)
	}
	return st, err
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadSnapshot}, args...)...)
}

func (sr *snapReader) read() (restored, error) {
	c, st := sr.c, &sr.st
	magic := make([]byte, len(snapMagic))
	if _, err := io.ReadFull(c, magic); err != nil || (string(magic) != snapMagic && string(magic) != snapMagicV1) {
		return *st, bad("no %q at the start", snapMagic)
	}
	v1 := string(magic) == snapMagicV1
	var err error
	var nhttp uint64
	if st.applied, err = c.uv(); err == nil {
		if st.next, err = c.uv(); err == nil {
			nhttp, err = c.uv()
		}
	}
	if err != nil {
		return *st, bad("header: %v", err)
	}
	if nhttp > 1<<16 {
		return *st, bad("%d node addresses", nhttp)
	}
	for range nhttp {
		id, err1 := c.bytes(1024)
		addr, err2 := c.bytes(1024)
		if err := errors.Join(err1, err2); err != nil {
			return *st, bad("node addresses: %v", err)
		}
		st.http[string(id)] = string(addr)
	}
	if v1 { // one queue, the default one, and no section names it
		if err := sr.startQueue(DefaultQueue); err != nil {
			return *st, err
		}
	}
	var lastName string
	for {
		kind, err := c.ReadByte()
		if err != nil {
			return *st, bad("message %d: %v", sr.n, err)
		}
		switch {
		case kind == snapEnd:
		case kind == snapMessage && sr.fq != nil:
			if err := sr.message(); err != nil {
				return *st, err
			}
			continue
		case kind == snapSection && !v1:
			name, err := c.bytes(queue.MaxQueueNameBytes)
			if err != nil {
				return *st, bad("queue %d: %v", sr.queues, err)
			}
			if err := CheckQueueName(string(name)); err != nil || (sr.queues > 0 && string(name) <= lastName) {
				return *st, bad("queue %d: name %q after %q (%v)", sr.queues, name, lastName, err)
			}
			lastName = string(name)
			if err := sr.startQueue(lastName); err != nil {
				return *st, err
			}
			continue
		default:
			return *st, bad("item %d: kind %d", sr.n+sr.queues, kind)
		}
		break
	}
	if err := sr.flush(); err != nil {
		return *st, err
	}
	if !v1 {
		count, err := c.uv()
		if err != nil || count != sr.queues {
			return *st, bad("%d queues, the end says %d (%v)", sr.queues, count, err)
		}
	}
	count, err := c.uv()
	if err != nil || count != sr.n {
		return *st, bad("%d messages, the end says %d (%v)", sr.n, count, err)
	}
	sum := c.crc.Sum32()
	var tail [4]byte
	if _, err := io.ReadFull(c.r, tail[:]); err != nil {
		return *st, bad("checksum: %v", err)
	}
	if got := binary.BigEndian.Uint32(tail[:]); got != sum {
		return *st, bad("checksum %08x, computed %08x", got, sum)
	}
	if _, err := c.r.ReadByte(); err != io.EOF {
		return *st, bad("bytes after the checksum")
	}
	return *st, nil
}

// startQueue ends the queue being filled and starts the queue name.
func (sr *snapReader) startQueue(name string) error {
	if err := sr.flush(); err != nil {
		return err
	}
	q, err := sr.s.Queue(name)
	if err != nil {
		return err
	}
	sr.fq = newFSMQueue(q)
	sr.st.queues[name] = sr.fq
	sr.last = 0
	sr.queues++
	return nil
}

// message reads one message of the queue being filled.
func (sr *snapReader) message() error {
	c := sr.c
	id, err := c.uv()
	var due uint64
	if err == nil {
		due, err = c.uv()
	}
	var group, body []byte
	if err == nil {
		group, err = c.bytes(queue.MaxIDBytes)
	}
	if err == nil {
		body, err = c.bytes(sr.f.max)
	}
	switch {
	case err != nil:
		return bad("message %d: %v", sr.n, err)
	case id <= sr.last || id >= sr.st.next || due > 1<<62:
		return bad("message %d: id %d after %d, next id %d, due %d", sr.n, id, sr.last, sr.st.next, due)
	}
	sr.last = id
	sr.n++
	sr.batch = append(sr.batch, Outgoing{Body: body, Due: int64(due), Group: string(group)})
	sr.ids = append(sr.ids, id)
	if sr.size += len(body); sr.size >= restoreBatch {
		return sr.flush()
	}
	return nil
}

// flush sends the messages read to the queue being filled.
func (sr *snapReader) flush() error {
	if len(sr.batch) == 0 {
		return nil
	}
	fq := sr.fq
	err := send(fq.q, sr.batch, func(off uint64, i int) {
		fq.offOf[sr.ids[i]] = off
		fq.idOf[off] = sr.ids[i]
	})
	sr.batch, sr.ids, sr.size = sr.batch[:0], sr.ids[:0], 0
	return err
}
