package engine

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/mmapfile"
)

// log.notify: where a writer tells readers in other processes how far its
// active segment holds whole records, through shared memory, and wakes the
// ones that sleep.
//
// On-disk format: never change, bump the version instead. The words are
// big-endian like every other integer of the format, but they are memory
// shared between processes of one machine, read and written with atomic
// instructions (a word is stored byte-swapped on a little-endian machine);
// they are hints, never trusted over the log: a reader verifies every
// record it serves.
//
//	byte  size  field
//	0     1     version (1)
//	1     7     zero
//	8     8     tail: generation (4 bytes), then end (4 bytes): the bytes of
//	            whole records in the active segment. Stored after every
//	            append; the end's 4 bytes (offset 12) are the futex word
//	            readers sleep on.
//	16    8     zero
//	24    4     generation of the identity below; its top bit is set while
//	            the writer changes the identity
//	28    4     zero
//	32    8     base offset of the active segment
//	40    8     device of its .log file
//	48    8     inode of its .log file
//	56    8     zero
//	64    4     sleepers: non-zero when a reader may be asleep on the
//	            futex word; the writer clears it and wakes them
//	68    60    zero
//
// The generation moves whenever the active segment's file changes (a roll,
// a cut of the tail by Truncate, a writable open: a new writer goes on
// from the generation it finds), so that an end is only
// ever paired with the file it was measured in: a reader reads the mapping
// of that file up to it without a system call, and since a writer never
// shrinks a .log file below the end of its whole records, those bytes are
// inside the file.
const (
	notifyName    = "log.notify"
	notifyVersion = 1
	notifySize    = 128

	notifyTail     = 8
	notifyFutex    = 12
	notifyIDGen    = 24
	notifyBase     = 32
	notifyDev      = 40
	notifyIno      = 48
	notifySleepers = 64

	idChanging = 1 << 31
)

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// be64 and be32 turn a native value into the big-endian word that holds it
// in memory, and back (the same swap).
func be64(v uint64) uint64 {
	if littleEndian {
		return bits.ReverseBytes64(v)
	}
	return v
}

func be32(v uint32) uint32 {
	if littleEndian {
		return bits.ReverseBytes32(v)
	}
	return v
}

// notifyMap is a mapping of log.notify. It is unmapped when the last user
// lets it go (a reader may be asleep on it when the log closes).
//
// A reader maps it twice: read-only for everything it reads and for the
// futex calls, and writable (when it may) only to announce that it sleeps.
// The kernel takes a futex's key through a write fault when the mapping
// allows writing, and a write fault on a shared file mapping updates the
// file's modification time: a reader that only reads must change nothing,
// not even that.
type notifyMap struct {
	mem      []byte // the writer's writable mapping; a reader's read-only one
	announce []byte // a reader's writable mapping, for sleepers (nil: none)
	writable bool   // the writer's, or a reader that may announce itself
	refs     atomic.Int64
}

func (n *notifyMap) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&n.mem[off])) }
func (n *notifyMap) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&n.mem[off])) }

func (n *notifyMap) load64(off int) uint64     { return be64(atomic.LoadUint64(n.u64(off))) }
func (n *notifyMap) store64(off int, v uint64) { atomic.StoreUint64(n.u64(off), be64(v)) }
func (n *notifyMap) load32(off int) uint32     { return be32(atomic.LoadUint32(n.u32(off))) }
func (n *notifyMap) store32(off int, v uint32) { atomic.StoreUint32(n.u32(off), be32(v)) }

// tail returns the generation and the end of the tail word.
func (n *notifyMap) tail() (gen uint32, end uint32) {
	t := n.load64(notifyTail)
	return uint32(t >> 32), uint32(t)
}

// acquire takes a reference; it fails once the mapping is gone.
func (n *notifyMap) acquire() bool {
	for {
		r := n.refs.Load()
		if r <= 0 {
			return false
		}
		if n.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (n *notifyMap) release() {
	if n.refs.Add(-1) == 0 {
		_ = mmapfile.Unmap(n.mem)
		_ = mmapfile.Unmap(n.announce)
		n.mem, n.announce = nil, nil
	}
}

// announceSleep sets the sleepers word: a reader is about to sleep on the
// futex word.
func (n *notifyMap) announceSleep() {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&n.announce[notifySleepers])), be32(1))
}

// notifyID is what the identity block says: the file a generation's ends
// are measured in.
type notifyID struct {
	gen  uint32
	base uint64
	file [2]uint64
}

// identity reads the identity block; ok is false while the writer changes
// it.
func (n *notifyMap) identity() (notifyID, bool) {
	g1 := n.load32(notifyIDGen)
	id := notifyID{gen: g1, base: n.load64(notifyBase),
		file: [2]uint64{n.load64(notifyDev), n.load64(notifyIno)}}
	g2 := n.load32(notifyIDGen)
	return id, g1 == g2 && g1&idChanging == 0
}

// notifier is the writer's side: log.notify kept up to date under Log.mu.
type notifier struct {
	m    *notifyMap
	gen  uint32
	seg  *segment.Segment // the segment the generation names
	tail uint64           // the last tail word stored
}

// openNotifier opens (creating it if needed) log.notify for a writable
// log and publishes the active segment. A file that is short or of
// another version is set up again in place: never replaced, so that a
// reader that maps it keeps seeing it. A failure (a full disk among
// them) leaves the log without one: readers then find records by looking
// at the files.
func openNotifier(dir string, mode os.FileMode, s *segment.Segment) (*notifier, error) {
	f, err := regfile.Open(filepath.Join(dir, notifyName), os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Its blocks are allocated before the first store, a file found at
	// its size too (a writer may have ended between making it and
	// storing in it): a store into a hole of a full file system raises
	// SIGBUS, where fallocate fails with ENOSPC.
	if err := mmapfile.Allocate(f, 0, notifySize); err != nil {
		return nil, err
	}
	mem, err := mmapfile.Map(f, notifySize, true)
	if err != nil {
		return nil, err
	}
	m := &notifyMap{mem: mem, writable: true}
	m.refs.Store(1)
	nt := &notifier{m: m}
	// The generation goes on from the one found, whatever the file holds,
	// so that a reader never pairs a new end with a file it learned under
	// an old generation.
	nt.gen, _ = m.tail()
	if m.load64(0)>>56 != notifyVersion {
		m.store32(notifySleepers, 0)
		m.store64(0, notifyVersion<<56)
	}
	nt.publish(s)
	futexWake(m.u32(notifyFutex)) // readers asleep on the last writer's word
	return nt, nil
}

// publish stores the active segment's end (and, when the segment changed,
// its identity under a new generation). The caller holds Log.mu. It costs
// one atomic store per append.
func (nt *notifier) publish(s *segment.Segment) {
	m := nt.m
	if s != nt.seg {
		nt.gen = (nt.gen + 1) &^ idChanging
		m.store32(notifyIDGen, nt.gen|idChanging)
		id := s.FileID()
		m.store64(notifyBase, s.Base())
		m.store64(notifyDev, id[0])
		m.store64(notifyIno, id[1])
		m.store32(notifyIDGen, nt.gen)
		nt.seg = s
	}
	t := uint64(nt.gen)<<32 | uint64(uint32(s.End()))
	if t != nt.tail {
		m.store64(notifyTail, t)
		nt.tail = t
	}
}

// sleeping reports whether a reader announced that it sleeps on the
// futex word: one atomic load. The writer calls it under Log.mu, after
// publish (a reader announces itself, then reads the end: one of the two
// sees the other).
func (nt *notifier) sleeping() bool {
	return atomic.LoadUint32(nt.m.u32(notifySleepers)) != 0
}

// wake wakes the readers asleep on the futex word. It may run beside
// Close: the mapping is held while it is used.
func (nt *notifier) wake() {
	m := nt.m
	if !m.acquire() {
		return
	}
	if atomic.SwapUint32(m.u32(notifySleepers), 0) != 0 {
		futexWake(m.u32(notifyFutex))
	}
	m.release()
}

// close lets the writer's mapping go.
func (nt *notifier) close() { nt.m.release() }

// openNotifyView maps log.notify for a reader: read-only, and writable
// too when it may be (to announce a sleeper; a reader that may not polls
// instead of sleeping). It returns nil when there is no usable file.
func openNotifyView(dir string) *notifyMap {
	path := filepath.Join(dir, notifyName)
	writable := true
	f, err := regfile.Open(path, os.O_RDWR, 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, regfile.ErrNotRegular) {
		writable = false
		f, err = regfile.Open(path, os.O_RDONLY, 0)
	}
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() < notifySize {
		return nil
	}
	mem, err := mmapfile.Map(f, notifySize, false)
	if err != nil {
		return nil
	}
	m := &notifyMap{mem: mem}
	m.refs.Store(1)
	if m.load64(0)>>56 != notifyVersion {
		m.release()
		return nil
	}
	if writable {
		if m.announce, err = mmapfile.Map(f, notifySize, true); err == nil {
			m.writable = true
		}
	}
	return m
}
