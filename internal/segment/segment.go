package segment

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pagelog/pagelog/internal/addrspace"
	"github.com/pagelog/pagelog/mmapfile"
	"github.com/pagelog/pagelog/sparseidx"
)

// Errors of this package. The engine wraps them with its own sentinels.
var (
	// ErrCorrupt marks damage in a segment: a record that fails its checks
	// where a good record must be.
	ErrCorrupt = errors.New("pagelog: corrupt record")
	// ErrNotFound is returned for an offset the segment does not hold.
	ErrNotFound = errors.New("pagelog: offset not found")
	// ErrMisnamed marks a segment whose first record verifies but carries
	// another id than its file name says (a renamed or copied file). It
	// wraps ErrCorrupt.
	ErrMisnamed = fmt.Errorf("%w: segment file name does not match its records", ErrCorrupt)
)

// Config holds the settings every segment of a log shares. The engine owns
// it; segments only read it.
type Config struct {
	Dir           string
	SegmentBytes  int64  // roll threshold and preallocation size
	IndexInterval int    // sparse-index spacing in bytes
	MaxLength     uint32 // largest length field accepted as a record
	MaxRecord     int    // largest whole record the writer appends
	ReadOnly      bool   // never write, truncate or create a file
	FileMode      os.FileMode

	// SmallPages keeps the active mapping in 4 KiB pages. Large folios
	// make a page fault map many pages at once, but a dirty large folio is
	// written back whole: under a policy that syncs after every append, a
	// 1 KiB record would cost a multi-megabyte write.
	SmallPages bool

	// KeepActiveSize: the log reuses dropped segment files
	// (recycle.go), so an active segment opened at a restart may be one
	// that a reader in another process still maps at its old size: Seal
	// never trims it below the size its open found.
	KeepActiveSize bool

	// WriteThrough writes records with pwrite instead of through the
	// writable mapping. Under a policy that syncs after every append, each
	// fdatasync write-protects the pages it wrote, and the next store
	// through the mapping pays a page fault for it; a pwrite pays none.
	WriteThrough bool

	// Ranges, when set, holds the segment's read-only mapping: given back,
	// it is overlaid with zero pages and its range reused by the same pool,
	// never unmapped (see internal/addrspace). For callers whose contract
	// says a stale slice may be read but must never crash the process (the
	// queue's message bodies).
	Ranges *addrspace.Pool

	// Maps bounds the sealed segments mapped at once (see MapCache); nil
	// keeps every segment mapped once used.
	Maps *MapCache

	// Allocate reserves file space; nil means mmapfile.Allocate. Tests
	// replace it to inject a full disk.
	Allocate func(f *os.File, off, n int64) error
	// Datasync flushes a file; nil means mmapfile.Datasync. Tests replace
	// it to inject a failed fsync.
	Datasync func(f *os.File) error
	// NowMillis is the clock of the time index; nil means the wall clock.
	NowMillis func() int64
}

func (c *Config) datasync(f *os.File) error {
	if c.Datasync != nil {
		return c.Datasync(f)
	}
	return mmapfile.Datasync(f)
}

func (c *Config) allocate(f *os.File, off, n int64) error {
	if c.Allocate != nil {
		return c.Allocate(f, off, n)
	}
	return mmapfile.Allocate(f, off, n)
}

// capacity is the mapped size of an active segment: room for SegmentBytes,
// and always for at least one record of the largest size.
func (c *Config) capacity() int64 {
	n := c.SegmentBytes
	if int64(c.MaxRecord) > n {
		n = int64(c.MaxRecord)
	}
	return n
}

// indexCapacity is how many entries an index of a segment of size bytes can
// need: an entry follows more than IndexInterval bytes, and records are at
// least 16 bytes. Every record a segment gets under the current settings
// starts below SegmentBytes (the roll rule; one larger than a segment
// starts at 0), so an active segment's index files are sized for
// SegmentBytes, or for its file when a larger SegmentBytes wrote it, not
// for its mapping (which has room for a record of MaxRecord bytes): a log
// of 4 KiB segments kept 5 KiB of index files for each of them. A full
// index only stops taking entries; reads then walk a little further.
func (c *Config) indexCapacity(size int64) int {
	gap := int64(c.IndexInterval) + 1
	if gap < 16 {
		gap = 16
	}
	return int(size/gap) + 1
}

// Segment is one segment of a log. See the package documentation for its
// concurrency and lifetime rules.
type Segment struct {
	cfg  *Config
	base uint64

	f  *os.File // the .log file; nil once a read-only segment is mapped
	ro []byte   // read-only mapping of the .log file
	rw []byte   // writable mapping, active segments only

	idx      atomic.Pointer[index]
	checked  atomic.Bool             // index checked against the log (sealed segments)
	distrust atomic.Bool             // a lookup found an entry pointing at another record
	timeEnd  atomic.Pointer[timeEnd] // see TimeEnd
	lostTail atomic.Bool             // a view's offsets end in a range MissingUpTo marked (see endsMissing)
	indexGen atomic.Uint64           // rebuilds of the index (under mu): a timeEnd of an older one is stale
	sealed   atomic.Bool             // never written again: its index may be rebuilt at any time
	mu       sync.Mutex              // serializes index checks and rebuilds
	retired  [][]byte                // index mappings replaced by a rebuild, unmapped at the end

	end  atomic.Int64  // bytes of whole, published records
	next atomic.Uint64 // offset after the last published record
	refs atomic.Int64
	// disowned is set when the log gives its reference back (Close): the
	// references left are readers', and the mapping is theirs.
	disowned atomic.Bool
	// reads counts the log's Reads served from this segment: on the cache
	// line a Read writes anyway (refs), so that counting costs it nothing
	// measurable (a striped counter of its own cost +4% at the p50).
	reads atomic.Uint64

	// recEnd is the offset after the last record the file holds: below
	// next when a sealed segment's records end cleanly before the next
	// segment's base (the records of a removed file are missing).
	recEnd atomic.Uint64
	// misnamedWhy says why the first record does not match the file name
	// ("" when it does); set once, before the segment is shared.
	misnamedWhy string
	// fileID is the device and inode of the mapped .log file (views).
	fileID [2]uint64
	// rp is the recovery point the segment was opened with; wholeReach
	// is set for segments opened sealed. Both shape how far a walk looks
	// past damage (see reach).
	rp         int64
	wholeReach bool

	w     *writer    // nil when sealed; the writer's alone except under popMu
	popMu sync.Mutex // held by the prefaulter; Seal takes it to unmap
	// growMu serializes grow, the writer's and the prefaulter's. It is
	// never held across a page fault: a writer that meets the end of the
	// allocated file waits for a fallocate, not for the prefaulter's
	// chunk (up to milliseconds zeroing a 2 MiB folio), with its
	// goroutine parked meanwhile.
	growMu sync.Mutex

	prepared bool // created by Prepare and not yet activated: named PreparedPrefix
	// indexPending is set from Activate until NameIndexes: the .log has
	// its segment's name, the index files still have the prepared ones.
	// nameMu serializes NameIndexes (the log's background goroutine, or
	// Seal's own call).
	indexPending atomic.Bool
	nameMu       sync.Mutex
	// beforeIndexRead, when set (by tests), runs in readIndexFile once
	// the file's path is chosen, before the file is opened.
	beforeIndexRead func(path string)

	// Recycling (recycle.go): keepSize is the size of a reused .log file,
	// below which Seal never trims it; recycleAs and recyclePut hand a
	// dropped segment's file on once its last reference is gone.
	keepSize   int64
	dropping   bool // the log is removing or reusing its files (under mu): no index file is written again
	memIndex   bool // the index was rebuilt and its files not written (under mu): see ensureMapped
	recycleAs  string
	recyclePut func(path string)
	leftMapped atomic.Bool // an eviction could not take the mapping away

	// lazy segments (opened by OpenSealed, or sealed in this process: see
	// joinMapCache) are mapped on first use and may be unmapped again by
	// the log's MapCache when no reader holds them.
	lazy        atomic.Bool
	isMapped    atomic.Bool
	touched     atomic.Bool           // used since the cache's clock last passed
	unreadable  atomic.Pointer[error] // why the last mapping attempt failed
	keptEntries int64                 // index entries checked, kept across an eviction (under mu)

	// sealedAt is when the segment was sealed (Unix ms): by Seal, or the
	// file's modification time for one opened sealed. Retention by age
	// uses it for a segment without a time-index entry.
	sealedAt atomic.Int64

	activeView bool // a read-only view of a segment another process may append to
	successor  bool // a view of a segment another one follows: no record is added to it any more
}

// index is one view of a segment's two index files. A rebuild replaces the
// whole view; readers keep whichever view they loaded.
type index struct {
	off    sparseidx.Offsets
	tim    sparseidx.Times
	n      atomic.Int64 // published entries, the same in both
	offMap []byte       // mappings to unmap when the segment ends (nil for heap)
	timMap []byte
}

func (x *index) entries() int { return int(x.n.Load()) }

// publishEnd makes the records up to end (offsets below next) visible to
// readers.
func (s *Segment) publishEnd(end int64, next uint64) {
	s.end.Store(end)
	s.recEnd.Store(next)
	s.next.Store(next)
}

// DiskBytes is what the segment's records and index entries take on disk
// (an active segment's files are allocated ahead of its records by a few
// MiB more). Safe to call at any time.
func (s *Segment) DiskBytes() int64 {
	const entry = sparseidx.OffsetEntrySize + sparseidx.TimeEntrySize
	n := int64(0)
	if x := s.idx.Load(); x != nil {
		n = int64(x.entries())
	}
	return s.end.Load() + n*entry
}

// NoteSealTime records when the writer sealed the segment (Unix ms): the
// writer calls it at the roll, on its own goroutine, since the seal itself
// may run later on another.
func (s *Segment) NoteSealTime() { s.sealedAt.Store(s.cfg.nowMillis()) }

// NewestTime returns the time (Unix ms) of the segment's newest record as
// far as its time index says, or when it was sealed if its index has no
// entry; ok is false when neither is known.
func (s *Segment) NewestTime() (ms int64, ok bool) {
	n, last, _, known := s.TimeEnd()
	if !known {
		unpin, ok := s.pin()
		if !ok {
			return 0, false
		}
		n, last = s.TimeIndex().lastEntry()
		unpin()
	}
	if n > 0 {
		return last, true
	}
	ms = s.sealedAt.Load()
	return ms, ms != 0
}

// MarkDropped records that the log is about to remove the segment's files
// or reuse its .log (a drop). An index a reader rebuilds from here on (its
// first lookup of a lazily opened segment, or a lookup that distrusts an
// entry) stays in memory: writing its files would bring back files of a
// segment that is gone. Nor is a segment without a descriptor mapped again
// by name from here on (see ensureMapped): its reads report errDropped.
func (s *Segment) MarkDropped() {
	s.mu.Lock()
	s.dropping = true
	s.mu.Unlock()
}

// Base returns the segment's base offset: the id of its first record.
func (s *Segment) Base() uint64 { return s.base }

// Next returns the offset after the segment's last published record.
func (s *Segment) Next() uint64 { return s.next.Load() }

// Holds returns the offset after the last record the segment's file holds
// (checking its index first if needed): below Next when the records end
// before the next segment begins.
func (s *Segment) Holds() uint64 {
	from, _ := s.Missing()
	return min(from, s.next.Load())
}

// End returns the byte size of the segment's published records.
func (s *Segment) End() int64 { return s.end.Load() }

// MappedBytes returns the length of the segment's read mapping (0 when
// it is not mapped). A view's mapping is set at its open: what a
// follower reads past it needs the view reopened.
func (s *Segment) MappedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.ro))
}

// finished reports whether no record may follow the segment's records: it
// is sealed, or a view of a segment that another one follows. Safe beside
// the writer (unlike a look at s.w).
func (s *Segment) finished() bool { return s.successor || s.sealed.Load() }

// Active reports whether the segment is still written to.
func (s *Segment) Active() bool { return s.w != nil }

// Path returns the path of the segment's .log file.
func (s *Segment) Path() string { return s.path(LogSuffix) }

// Acquire takes a reference for a reader. It fails once the segment has been
// finally released.
func (s *Segment) Acquire() bool {
	if !s.Hold() {
		return false
	}
	if s.lazy.Load() {
		if !s.touched.Load() {
			s.touched.Store(true)
		}
		if !s.isMapped.Load() {
			s.ensureMapped()
		}
	}
	return true
}

// Hold takes a reference that keeps the segment from being finished
// without mapping it: for a use of its file, not its bytes (Sync). It
// fails once the segment has been finally released.
func (s *Segment) Hold() bool {
	for {
		n := s.refs.Load()
		if n <= evicting/2 {
			waitEvicted()
			continue
		}
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// NoteRead counts one Read served from the segment; Reads returns the count.
func (s *Segment) NoteRead()     { s.reads.Add(1) }
func (s *Segment) Reads() uint64 { return s.reads.Load() }

// Release drops a reference; the last one unmaps the segment. One that
// leaves a lazy segment to its log alone lets the map cache evict down to
// its bound, if readers held it past.
func (s *Segment) Release() {
	switch n := s.refs.Add(-1); {
	case n == 0:
		s.finish()
	case n == 1 && s.lazy.Load():
		if c := s.cfg.Maps; c != nil && c.over() {
			c.shrink()
		}
	}
}

// Close drops the owner's reference: the log no longer serves this segment.
// An active segment is not sealed by Close; its preallocated tail stays.
func (s *Segment) Close() error {
	var err error
	if s.w != nil {
		err = s.w.close()
	}
	s.disowned.Store(true) // before the reference goes: see tryEvict
	s.Release()
	return err
}

// finish unmaps everything once no one holds a reference.
func (s *Segment) finish() {
	if s.lazy.Load() && s.cfg.Maps != nil {
		s.cfg.Maps.remove(s)
	}
	var err error // a mapping of the .log file left in place
	if s.ro == nil {
		// A lazy segment never mapped, or evicted: nothing to give back.
	} else if s.cfg.Ranges != nil {
		// Never unmapped: a failed overlay leaves the file mapped.
		err = s.cfg.Ranges.Retire(s.ro)
	} else {
		err = mmapfile.Unmap(s.ro)
	}
	s.ro = nil
	s.popMu.Lock() // the prefaulter may still hold this segment
	if rerr := mmapfile.Unmap(s.rw); err == nil {
		err = rerr
	}
	s.rw = nil
	s.popMu.Unlock()
	if x := s.idx.Load(); x != nil {
		_ = mmapfile.Unmap(x.offMap)
		_ = mmapfile.Unmap(x.timMap)
	}
	for _, m := range s.retired {
		_ = mmapfile.Unmap(m)
	}
	s.retired = nil
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	s.handOn(err == nil && !s.leftMapped.Load())
}

// corrupt builds the error for damage at pos.
func (s *Segment) corrupt(offset uint64, pos int64, why string) error {
	why = strings.TrimPrefix(why, ErrCorrupt.Error()+": ")
	if pos < 0 {
		return fmt.Errorf("%w: offset %d in segment %s: %s", ErrCorrupt, offset, Name(s.base, LogSuffix), why)
	}
	return fmt.Errorf("%w: offset %d in segment %s at position %d: %s",
		ErrCorrupt, offset, Name(s.base, LogSuffix), pos, why)
}
