package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/mmapfile"
	"github.com/pagelog/pagelog/sparseidx"
)

// OpenActive opens the newest segment of a log for appending and recovers
// its end (see recoverActive). A segment whose first record carries another
// id than its name says is refused with ErrMisnamed: appending after it
// would give new records offsets its records already use.
func OpenActive(cfg *Config, base uint64, h Hint) (*Segment, Recovery, error) {
	s := &Segment{cfg: cfg, base: base}
	s.refs.Store(1)
	if err := s.openWriter(); err != nil {
		s.abandon()
		return nil, Recovery{}, err
	}
	// The file may be a reused one (Options.RecycleSegments) that a reader
	// in another process still maps at its old size: Seal never trims it
	// below the size found here, which nothing else remembers across a
	// restart.
	if cfg.KeepActiveSize {
		s.keepSize = s.w.alloc.Load()
	}
	rep, err := s.recoverActive(h)
	if err != nil {
		s.abandon()
		return nil, rep, err
	}
	return s, rep, nil
}

// OpenView opens a read-only view of a segment that another process may be
// appending to or sealing: the newest segments of a log opened read-only.
// next is the base offset of the segment after it (math.MaxUint64 for the
// newest).
//
// Nothing of the file past the end of its verified records is ever read
// through the mapping: the end is found by reading the file with pread, and
// the index files are copied into memory, because the writer trims all
// three files when it seals the segment and a mapped byte past a file's end
// faults. The rules for damage and torn tails are those of a writable open
// (see findEnd), with the same checkpoint files, but nothing is cut or
// written: a torn tail, or a record still being appended, just lies past
// the view's end.
func OpenView(cfg *Config, base, next uint64, h Hint) (*Segment, Recovery, error) {
	start := time.Now()
	s := &Segment{cfg: cfg, base: base, activeView: true, successor: next != noNext, rp: h.RecoveryPoint}
	s.refs.Store(1)
	rep := Recovery{Segment: Name(base, LogSuffix), RecoveryPoint: h.RecoveryPoint, View: true}
	f, err := regfile.Open(s.path(LogSuffix), os.O_RDONLY, 0)
	if err != nil {
		return nil, rep, fmt.Errorf("segment: open: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err == nil {
		s.fileID = fileIdentity(st)
		// Mapped at the segment's full size, past the file's end: a
		// follower publishes records the writer appends later without
		// mapping again (see Follower); no byte past the end of the
		// verified records is ever read through the mapping.
		s.ro, err = s.mapReaders(f, max(st.Size(), cfg.capacity()))
	}
	if err != nil {
		s.finish()
		return nil, rep, fmt.Errorf("segment: open: %w", err)
	}
	size := st.Size() // what the walk may read: the file, not the mapping
	x := s.copyIndex()
	s.idx.Store(x)
	src := newFileSource(f)
	end := endFound{next: base, lastPos: -1, missing: noNext}
	if why := s.misnamed(src); why != "" {
		s.misnamedWhy = why
	} else {
		end = s.viewEnd(src, x, size, next, h, &rep)
	}
	if src.err != nil {
		s.finish()
		return nil, rep, fmt.Errorf("segment: read %s: %w", f.Name(), src.err)
	}
	s.publishEnd(end.pos, end.next)
	if end.missing < end.next {
		s.recEnd.Store(end.missing)
	}
	if next != noNext && end.next < next {
		// Records end before the next segment begins: the offsets
		// between are missing, as in a sealed segment (checkIndex).
		s.next.Store(next)
	}
	s.checked.Store(true)
	rep.End, rep.Next = end.pos, end.next
	rep.Took = time.Since(start)
	return s, rep, nil
}

// viewEnd finds the end of a view's records, as recoverActive does for a
// writer, and extends the view's in-memory index with the entries the walk
// finds owed.
func (s *Segment) viewEnd(src *fileSource, x *index, size int64, next uint64, h Hint, rep *Recovery) endFound {
	n := s.trustedEntries(x, src, size)
	x.n.Store(int64(n))
	if c := h.Clean; c != nil {
		if why := s.trustClean(c, src, size, n); why == "" && c.Next <= next {
			rep.Clean = true
			return endFound{pos: c.End, next: c.Next, lastPos: c.LastPos, missing: noNext}
		} else if why != "" {
			rep.CleanMismatch = why
		}
	}
	n = entriesBefore(x, n, h.RecoveryPoint)
	x.n.Store(int64(n))
	x.off.Buf = x.off.Buf[:n*sparseidx.OffsetEntrySize]
	x.tim.Buf = x.tim.Buf[:n*sparseidx.TimeEntrySize]
	pos, id := int64(0), s.base
	lastMs := int64(0)
	if n > 0 {
		rel, p := x.off.Entry(n - 1)
		pos, id = int64(p), s.base+uint64(rel)
		lastMs, _ = x.tim.Entry(n - 1)
	}
	now := max(s.cfg.nowMillis(), lastMs)
	entry := func(id uint64, p int64) {
		x.off.Buf = appendOffset(x.off.Buf, uint32(id-s.base), uint32(p))
		x.tim.Buf = appendTime(x.tim.Buf, now, uint32(id-s.base))
		x.n.Add(1)
	}
	sp := sparseidx.Spacer{Interval: s.cfg.IndexInterval}
	e := endSearch{src: src, limit: size, maxNext: next, hint: h, sp: &sp, entry: entry, view: src}
	return s.findEnd(&e, pos, id, rep)
}

// copyIndex reads the segment's index files into memory (with pread: a
// file another process may trim is never mapped). A missing file reads as
// empty.
func (s *Segment) copyIndex() *index {
	x := &index{}
	if b, err := s.readIndexFile(IndexSuffix); err == nil {
		x.off = sparseidx.Offsets{Buf: b}
	}
	if b, err := s.readIndexFile(TimeIndexSuffix); err == nil {
		x.tim = sparseidx.Times{Buf: b}
	}
	return x
}

// readIndexFile reads the segment's index file with the suffix given,
// never more bytes than any index of the segment can hold: one entry for
// each 16 bytes (the smallest record) of its .log file or of a segment
// under the settings, whichever is larger, whatever spacing wrote it. A
// larger file (a sparse one of gigabytes put in its place, say) gives a
// *regfile.SizeError and is never read whole.
func (s *Segment) readIndexFile(suffix string) ([]byte, error) {
	path := s.path(suffix)
	if s.beforeIndexRead != nil {
		s.beforeIndexRead(path)
	}
	return regfile.ReadFileMax(path, s.indexFileMax(suffix))
}

// indexFileMax is the most bytes the segment's index file with the suffix
// given can hold (see readIndexFile).
func (s *Segment) indexFileMax(suffix string) int64 {
	entry := int64(sparseidx.OffsetEntrySize)
	if suffix == TimeIndexSuffix {
		entry = sparseidx.TimeEntrySize
	}
	size := s.cfg.capacity()
	if st, err := os.Stat(s.path(LogSuffix)); err == nil {
		size = max(size, st.Size())
	}
	return (size/16 + 1) * entry
}

// OpenSealed opens a sealed segment read-only. next is the base offset of
// the segment after it. Its index is checked when first needed.
//
// The segment must be one no writer changes any more: a read-only open
// uses OpenView for the newest segments of a log, where a writer may still
// be sealing.
func OpenSealed(cfg *Config, base, next uint64) (*Segment, error) {
	s := &Segment{cfg: cfg, base: base, wholeReach: true}
	s.lazy.Store(true)
	s.refs.Store(1)
	s.idx.Store(&index{})
	if err := s.statSealed(); err != nil {
		return nil, err
	}
	s.next.Store(next)
	s.recEnd.Store(next)
	s.sealed.Store(true)
	return s, nil
}

// mapReadOnly maps the .log file and whatever index files exist. The
// caller holds s.mu.
//
// A segment sealed in this process that was not evicted since maps the
// file it wrote through its descriptor; one evicted maps it by name, as a
// segment opened sealed does (a file replaced since reads as errReplaced,
// one removed by a drop as errDropped). The index files of a segment the
// log is dropping are not mapped: they are gone, or a new segment's.
func (s *Segment) mapReadOnly() error {
	f := s.f
	if f == nil {
		var err error
		if f, err = regfile.Open(s.path(LogSuffix), os.O_RDONLY, 0); err != nil {
			return fmt.Errorf("segment: open: %w", err)
		}
		defer f.Close()
	}
	st, err := f.Stat()
	var m []byte
	if err == nil {
		s.fileID = fileIdentity(st)
		if s.sealedAt.Load() == 0 {
			// Known already for a segment sealed in this process
			// (by the log's clock) or opened sealed.
			s.sealedAt.Store(st.ModTime().UnixMilli())
		}
		m, err = s.mapReaders(f, st.Size())
	}
	if err != nil {
		return fmt.Errorf("segment: open: %w", err)
	}
	s.ro = m
	// Large folios let one read fault map many pages (no writes go through
	// this mapping, so nothing is written back whole).
	_ = mmapfile.Advise(m, 0, len(m), mmapfile.HugePage)
	x := &index{}
	if s.dropping {
		s.idx.Store(x)
		return nil
	}
	if f, m, err := openMapped(s.path(IndexSuffix)); err == nil {
		_ = f.Close()
		x.offMap, x.off = m, sparseidx.Offsets{Buf: m}
	}
	if f, m, err := openMapped(s.path(TimeIndexSuffix)); err == nil {
		_ = f.Close()
		x.timMap, x.tim = m, sparseidx.Times{Buf: m}
	}
	s.idx.Store(x)
	return nil
}

// mapReaders maps the .log file read-only for readers; a log whose
// released mappings are retired (a queue's) reuses retired address ranges.
// A size this process cannot map in one piece (a file of 2 GiB or more in
// a 32-bit process) is an error matching mmapfile.ErrAddressSpace.
func (s *Segment) mapReaders(f *os.File, size64 int64) ([]byte, error) {
	size, err := mmapfile.Len(size64)
	if err != nil {
		return nil, fmt.Errorf("segment: map %s: %w", f.Name(), err)
	}
	if s.cfg.Ranges != nil {
		return s.cfg.Ranges.Map(f, size)
	}
	return mmapfile.Map(f, size, false)
}

// lookupIndex returns the segment's index, checking it against the log the
// first time it is needed.
func (s *Segment) lookupIndex() *index {
	if s.readable() != nil {
		return s.idx.Load() // unreadable: an empty index
	}
	if !s.checked.Load() || s.distrust.Load() && s.sealed.Load() {
		s.mu.Lock()
		if !s.checked.Load() {
			s.checkIndex()
		}
		if s.distrust.Load() && s.sealed.Load() {
			s.rebuild(s.end.Load())
			s.distrust.Store(false)
		}
		s.mu.Unlock()
	}
	return s.idx.Load()
}

// CheckIndex checks the index of a sealed segment now (and repairs it when
// needed) rather than at its first lookup. It returns what was done.
func (s *Segment) CheckIndex() Recovery {
	unpin, ok := s.pin()
	if !ok {
		return Recovery{Segment: Name(s.base, LogSuffix)}
	}
	defer unpin()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checked.Load() {
		return Recovery{Segment: Name(s.base, LogSuffix), End: s.end.Load(), Next: s.recEnd.Load()}
	}
	return s.checkIndex()
}

// checkIndex checks a sealed segment against its index and finds what its
// file holds: the trusted entries, then a walk from the last of them to the
// end of the file that must not find a record owed an entry (else the index
// is rebuilt from the log). Damage on the way is stepped over. A file whose
// records end cleanly before the next segment's base leaves a missing range
// of offsets (the records of a removed segment file). The caller holds s.mu
// or owns the segment alone.
func (s *Segment) checkIndex() Recovery {
	rep := Recovery{Segment: Name(s.base, LogSuffix)}
	x := s.idx.Load()
	end, next := s.end.Load(), s.next.Load()
	src := mapSource(s.ro[:end])
	if why := s.misnamed(src); why != "" {
		s.misnamedWhy = why
		s.recEnd.Store(s.base)
		s.checked.Store(true)
		return rep
	}
	valid := x.off.Valid(end)
	n := s.trustedEntries(x, src, end)
	pos, id := int64(0), s.base
	if n > 0 {
		rel, p := x.off.Entry(n - 1)
		pos, id = int64(p), s.base+uint64(rel)
	}
	from := pos
	sp := sparseidx.Spacer{Interval: s.cfg.IndexInterval}
	short := false
	owed := func(uint64, int64) { short = true }
	for {
		r := s.walk(src, pos, id, end, next, &sp, owed)
		rep.Records += r.count
		pos, id = r.pos, r.next
		if r.stop == nil || id >= next {
			break
		}
		if errors.Is(r.stop, record.ErrEnd) && allZeroAt(src, pos, end-pos) {
			break
		}
		np, nid := s.resume(src, pos, id, next)
		if np < 0 {
			// Damage, or bytes that are not records, up to the end of
			// the file: the records from id on (if any) are damaged.
			id = next
			break
		}
		sp.Count += int(np - pos)
		pos, id = np, nid
	}
	if pos < end && allZeroAt(src, pos, end-pos) {
		// A sealed segment left untrimmed by a crash during a roll: its
		// records end early and zeros follow.
		s.end.Store(pos)
	}
	// Offsets from id on have no bytes in this file.
	s.recEnd.Store(min(id, next))
	rep.Walked, rep.End, rep.Next = pos-from, s.end.Load(), s.recEnd.Load()
	x.n.Store(int64(n))
	// A sealed segment's index files hold exactly its entries: anything
	// more (garbage, stale entries) is damage to repair too.
	extra := x.off.Cap() != n || x.tim.Cap() != n ||
		len(x.off.Buf)%sparseidx.OffsetEntrySize != 0 || len(x.tim.Buf)%sparseidx.TimeEntrySize != 0
	if short || n < valid || extra {
		rep.IndexRepaired = true
		rep.EntriesDropped = valid - n
		rep.EntriesAdded = s.rebuild(s.end.Load())
	}
	s.checked.Store(true)
	return rep
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// rebuild builds a new index for the records in [0, end) by walking them,
// keeping known append times, and swaps it in. A writable log writes the new
// files; a read-only one keeps them in memory. Damaged records are stepped
// over by searching for the next record that verifies. It returns the number
// of entries.
func (s *Segment) rebuild(end int64) int {
	old := s.idx.Load()
	b := s.buildIndex(end)
	x := &index{off: sparseidx.Offsets{Buf: b.offs}, tim: sparseidx.Times{Buf: b.tims}}
	x.n.Store(int64(len(b.offs) / sparseidx.OffsetEntrySize))
	s.memIndex = s.cfg.ReadOnly || !s.writeIndexFiles(b.offs, b.tims)
	s.retired = append(s.retired, old.offMap, old.timMap)
	s.idx.Store(x)
	s.indexGen.Add(1) // after the swap: a TimeIndex that saw this count reads x
	return int(x.n.Load())
}

// built is an index built from the records, with the sparse rule's state
// after the last record.
type built struct {
	offs, tims []byte
	spacer     sparseidx.Spacer
	lastMs     int64
}

// buildIndex walks the records in [0, end) and returns the entries the
// sparse rule gives them. Append times are kept from the old time index
// where it has the same entry, else taken as the file's modification time
// (later than every append to it: records may look younger, never older).
func (s *Segment) buildIndex(end int64) built {
	old := s.idx.Load()
	oldN := max(old.entries(), old.tim.Valid())
	src := mapSource(s.ro[:end])
	mtime := s.modTime()
	b := built{spacer: sparseidx.Spacer{Interval: s.cfg.IndexInterval}}
	add := func(id uint64, pos int64) {
		rel := uint32(id - s.base)
		ms := mtime
		if i, ok := old.tim.FloorRel(oldN, rel); ok {
			if t, r := old.tim.Entry(i); r == rel && t <= mtime {
				ms = t
			}
		}
		ms = max(ms, b.lastMs)
		b.lastMs = ms
		b.offs = appendOffset(b.offs, rel, uint32(pos))
		b.tims = appendTime(b.tims, ms, rel)
	}
	next := s.next.Load()
	pos, id := int64(0), s.base
	for pos < end {
		r := s.walk(src, pos, id, end, next, &b.spacer, add)
		if r.stop == nil || errors.Is(r.stop, record.ErrEnd) {
			break
		}
		np, nid := s.resume(src, r.pos, r.next, next)
		if np < 0 {
			break
		}
		b.spacer.Count += int(np - r.pos)
		pos, id = np, nid
	}
	return b
}

// RebuildIndex rebuilds the segment's index from its records whatever
// state it is in, and writes it back (a read-only log keeps it in memory).
// For the active segment, it rewrites the mapped index files in place; the
// caller must not be appending. It returns the number of entries.
func (s *Segment) RebuildIndex() int {
	unpin, ok := s.pin()
	if !ok {
		return 0
	}
	defer unpin()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checked.Store(true)
	if s.w == nil {
		return s.rebuild(s.end.Load())
	}
	b := s.buildIndex(s.end.Load())
	x := s.idx.Load()
	n := min(len(b.offs)/sparseidx.OffsetEntrySize, x.off.Cap(), x.tim.Cap())
	copy(x.offMap, b.offs[:n*sparseidx.OffsetEntrySize])
	copy(x.timMap, b.tims[:n*sparseidx.TimeEntrySize])
	x.n.Store(int64(n))
	s.clearEntries(x, n)
	s.w.spacer, s.w.lastMs = b.spacer, max(s.w.lastMs, b.lastMs)
	return n
}

// TrimSealed makes a sealed segment's files exact after a crash during a
// roll left them at their preallocated sizes: the .log is cut at the end of
// its records (never below: readers may hold any record) and the index
// files are rewritten with exactly their entries (a new file renamed over
// the old, so that a reader that mapped the old one keeps it). It returns
// the bytes cut from the .log file. Writable logs only.
func (s *Segment) TrimSealed() (int64, error) {
	unpin, ok := s.pin()
	if !ok {
		return 0, fmt.Errorf("segment: trim %s: the segment is closed", s.path(LogSuffix))
	}
	defer unpin()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checked.Load() {
		s.checkIndex()
	}
	var cut int64
	end := s.end.Load()
	if st, err := os.Stat(s.path(LogSuffix)); err == nil && st.Size() > end {
		if s.cfg.Ranges != nil {
			if err := s.cfg.Ranges.ZeroFrom(s.ro, int(end)); err != nil {
				return 0, fmt.Errorf("segment: trim %s: %w", Name(s.base, LogSuffix), err)
			}
		}
		if err := os.Truncate(s.path(LogSuffix), end); err != nil {
			return 0, fmt.Errorf("segment: trim %s: %w", Name(s.base, LogSuffix), err)
		}
		cut = st.Size() - end
	}
	x := s.idx.Load()
	n := x.entries()
	offs, tims := x.off.Buf[:n*sparseidx.OffsetEntrySize], x.tim.Buf[:n*sparseidx.TimeEntrySize]
	if !sizeIs(s.path(IndexSuffix), len(offs)) || !sizeIs(s.path(TimeIndexSuffix), len(tims)) {
		s.memIndex = !s.writeIndexFiles(append([]byte(nil), offs...), append([]byte(nil), tims...))
	}
	return cut, nil
}

func sizeIs(path string, n int) bool {
	st, err := os.Stat(path)
	return err == nil && st.Size() == int64(n) || errors.Is(err, fs.ErrNotExist) && n == 0
}

func (s *Segment) modTime() int64 {
	if st, err := os.Stat(s.path(LogSuffix)); err == nil {
		return st.ModTime().UnixMilli()
	}
	return s.cfg.nowMillis()
}

// writeIndexFiles replaces the index files of a sealed segment with rebuilt
// ones (temporary file, then rename). Failure leaves the old files: the
// index is a cache and the rebuilt copy is still served from memory. The
// caller holds s.mu. It reports whether both files were written.
func (s *Segment) writeIndexFiles(offs, tims []byte) bool {
	if s.dropping {
		return false // see MarkDropped
	}
	ok := true
	for _, f := range []struct {
		suffix string
		data   []byte
	}{{IndexSuffix, offs}, {TimeIndexSuffix, tims}} {
		path := s.path(f.suffix)
		tmp := path + ".tmp"
		mode := s.cfg.FileMode
		if mode == 0 {
			mode = 0o600
		}
		if err := regfile.WriteNew(tmp, f.data, mode, false); err != nil {
			_ = os.Remove(tmp)
			ok = false
			continue
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
			ok = false
		}
	}
	return ok
}

func appendOffset(b []byte, rel, pos uint32) []byte {
	var e [sparseidx.OffsetEntrySize]byte
	_ = sparseidx.Offsets{Buf: e[:]}.Put(0, rel, pos)
	return append(b, e[:]...)
}

func appendTime(b []byte, ms int64, rel uint32) []byte {
	var e [sparseidx.TimeEntrySize]byte
	_ = sparseidx.Times{Buf: e[:]}.Put(0, ms, rel)
	return append(b, e[:]...)
}

// noNext is the next offset of a segment with no successor.
const noNext = math.MaxUint64
