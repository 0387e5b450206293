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
	"sync"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/queue"
)

// A snapshot holds the FSM's counters and its live messages, not the log:
//
//	magic    "PLRQSNP1"
//	uv applied index, uv next id, uv count, count x (bytes node id, bytes HTTP address)
//	per live message, in id order: byte 1, uv id, uv due (Unix ms, 0: none), bytes group, bytes body
//	byte 0, uv number of messages
//	CRC-32C (Castagnoli) of all the above, 4 bytes big-endian
//
// (uv: unsigned varint; bytes: uv length, then the bytes.)
const snapMagic = "PLRQSNP1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadSnapshot: Restore was given bytes that are not a whole snapshot
// of this package. The FSM is left as it was.
var ErrBadSnapshot = errors.New("rqueue: damaged snapshot")

type snapshot struct {
	f       *FSM
	qdir    string
	pairs   [][2]uint64 // (local offset, id) of the live messages, by offset
	next    uint64
	applied uint64
	http    map[string]string
	resume  func() // lets the local queue's checkpoints drop segments again
	release sync.Once
}

// Snapshot captures the live messages' ids and local offsets; Persist
// reads their bodies from the local queue's files. A message deleted
// between the two is left out: every node that installs the snapshot
// applies that delete after it.
//
// Nothing a snapshot holds makes Restore wait: raft may hold a snapshot
// while its main loop waits for a Restore to end.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stopped(); err != nil {
		return nil, err
	}
	f.reading[f.qdir]++
	// Until Release, the queue's checkpoints remove no segment: Persist
	// reads the live messages from the queue's files while moves copy
	// held messages to the end of the log, and a checkpoint that dropped
	// a moved message's original or copy during the read would leave the
	// message out of the snapshot.
	return &snapshot{f: f, qdir: f.qdir, pairs: f.live(), next: f.next, applied: f.applied, http: maps.Clone(f.http),
		resume: f.q.PauseDrops()}, nil
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
		s.f.doneReading(s.qdir)
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
	b := []byte(snapMagic)
	b = binary.AppendUvarint(b, s.applied)
	b = binary.AppendUvarint(b, s.next)
	b = binary.AppendUvarint(b, uint64(len(s.http)))
	for id, addr := range s.http {
		b = appendBytes(b, []byte(id))
		b = appendBytes(b, []byte(addr))
	}
	bw.Write(b)
	i, n := 0, uint64(0)
	var err error
	if len(s.pairs) > 0 {
		err = queue.Messages(s.qdir, func(m queue.Stored) bool {
			for i < len(s.pairs) && s.pairs[i][0] < m.Offset {
				i++ // deleted since the snapshot was taken
			}
			if i == len(s.pairs) {
				return false
			}
			if s.pairs[i][0] != m.Offset {
				return true // sent after the snapshot was taken
			}
			if m.Err != nil {
				err = fmt.Errorf("rqueue: snapshot: message %d (offset %d): %w", s.pairs[i][1], m.Offset, m.Err)
				return false
			}
			b = append(b[:0], 1)
			b = appendMessage(b, s.pairs[i][1], m)
			_, err = bw.Write(b)
			i++
			n++
			return err == nil
		})
	}
	if err != nil {
		return err
	}
	b = append(b[:0], 0)
	b = binary.AppendUvarint(b, n)
	bw.Write(b)
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err = w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
	return err
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

// Restore replaces the FSM's queue with the snapshot's messages: a new
// queue directory is filled, and swapped in once the whole snapshot has
// been read and checked. A receiver blocked in Receive moves to the new
// queue; messages in flight on this node are ready again.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.Lock()
	closed, gen := f.closed, f.gen+1
	f.mu.Unlock()
	if closed {
		return ErrClosed
	}
	q, qdir, err := f.openGen(gen)
	if err != nil {
		return err
	}
	st, err := f.readSnapshot(&crcReader{r: bufio.NewReaderSize(rc, 1<<16), crc: crc32.New(castagnoli)}, q)
	if err != nil {
		_ = q.Close()
		_ = os.RemoveAll(qdir)
		return err
	}
	f.mu.Lock()
	old, oldDir := f.q, f.qdir
	f.q, f.qdir, f.gen = q, qdir, gen
	f.offOf, f.idOf = st.offOf, st.idOf
	f.next, f.applied, f.http = st.next, st.applied, st.http
	f.failed = nil
	f.mu.Unlock()
	// The old queue is no longer the FSM's: its errors change nothing. A
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
	offOf, idOf   map[uint64]uint64
	next, applied uint64
	http          map[string]string
}

func (f *FSM) readSnapshot(c *crcReader, q *queue.Queue) (restored, error) {
	st := restored{offOf: map[uint64]uint64{}, idOf: map[uint64]uint64{}, http: map[string]string{}}
	bad := func(format string, args ...any) (restored, error) {
		return st, fmt.Errorf("%w: "+format, append([]any{ErrBadSnapshot}, args...)...)
	}
	magic := make([]byte, len(snapMagic))
	if _, err := io.ReadFull(c, magic); err != nil || string(magic) != snapMagic {
		return bad("no %q at the start", snapMagic)
	}
	var err error
	var nhttp uint64
	if st.applied, err = c.uv(); err == nil {
		if st.next, err = c.uv(); err == nil {
			nhttp, err = c.uv()
		}
	}
	if err != nil {
		return bad("header: %v", err)
	}
	if nhttp > 1<<16 {
		return bad("%d node addresses", nhttp)
	}
	for range nhttp {
		id, err1 := c.bytes(1024)
		addr, err2 := c.bytes(1024)
		if err := errors.Join(err1, err2); err != nil {
			return bad("node addresses: %v", err)
		}
		st.http[string(id)] = string(addr)
	}
	var batch []Outgoing
	var ids []uint64
	size := 0
	flush := func() error {
		err := send(q, batch, func(off uint64, i int) {
			st.offOf[ids[i]] = off
			st.idOf[off] = ids[i]
		})
		batch, ids, size = batch[:0], ids[:0], 0
		return err
	}
	var n, last uint64
	for {
		kind, err := c.ReadByte()
		if err != nil {
			return bad("message %d: %v", n, err)
		}
		if kind == 0 {
			break
		}
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
			body, err = c.bytes(f.max)
		}
		switch {
		case err != nil:
			return bad("message %d: %v", n, err)
		case kind != 1 || id <= last || id >= st.next || due > 1<<62:
			return bad("message %d: kind %d, id %d after %d, next id %d, due %d", n, kind, id, last, st.next, due)
		}
		last = id
		n++
		batch = append(batch, Outgoing{Body: body, Due: int64(due), Group: string(group)})
		ids = append(ids, id)
		if size += len(body); size >= restoreBatch {
			if err := flush(); err != nil {
				return st, err
			}
		}
	}
	if err := flush(); err != nil {
		return st, err
	}
	count, err := c.uv()
	if err != nil || count != n {
		return bad("%d messages, the end says %d (%v)", n, count, err)
	}
	sum := c.crc.Sum32()
	var tail [4]byte
	if _, err := io.ReadFull(c.r, tail[:]); err != nil {
		return bad("checksum: %v", err)
	}
	if got := binary.BigEndian.Uint32(tail[:]); got != sum {
		return bad("checksum %08x, computed %08x", got, sum)
	}
	if _, err := c.r.ReadByte(); err != io.EOF {
		return bad("bytes after the checksum")
	}
	return st, nil
}
