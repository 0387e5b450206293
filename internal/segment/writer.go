package segment

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/mmapfile"
	"github.com/pagelog/pagelog/sparseidx"
)

// writer is the state only the appending goroutine touches.
type writer struct {
	idxF, timF *os.File
	spacer     sparseidx.Spacer
	pos        int64  // == Segment.end, writer's copy
	lastPos    int64  // position of the last record, -1 when none
	next       uint64 // == Segment.next, writer's copy
	lastMs     int64  // time of the newest time-index entry
	capacity   int64  // mapped size of the .log file
	idxCap     int    // entries the index files can hold

	// alloc is how much of the .log file is allocated: the file's size.
	// It grows ahead of the writer in steps (see grow), never past
	// capacity, so that a new segment does not take SegmentBytes of disk
	// before it holds them. Nothing may touch the mapping at or past it:
	// that is past the end of the file. Written under growMu.
	alloc atomic.Int64
	// step is the unit in which alloc grows now: small while the writer
	// is slow, up to Config.allocStep while it is fast (see SetAhead).
	step atomic.Int64

	populated int64 // bytes of the mapping already pre-faulted (under popMu)
	// idxPopulated: the index files' pages are faulted in (under popMu).
	idxPopulated bool
	buf          []byte // encoding buffer under WriteThrough
}

// extent is the allocated size of the .log file: how far the mapping may be
// read or written.
func (w *writer) extent() int64 { return w.alloc.Load() }

// allocStep is the unit in which the .log file of an active segment grows
// (see Config.allocStep for small segments).
const allocStep = 2 << 20

// startStep is the step a new active segment's .log file grows in until
// its log says the writer is fast (Segment.Prefault's step): an idle log
// keeps a few hundred KiB allocated past its records, not megabytes.
const startStep = 128 << 10

// allocStep returns the largest step in which a segment's .log file grows:
// allocStep, or an eighth of a segment (whole pages) for segments smaller
// than 16 MiB, so that a segment prepared ahead of a small log's writer
// does not take a whole segment of disk before it holds a byte (a queue
// with 64 KiB segments kept 64 KiB in its prepared file; now 8 KiB).
func (c *Config) allocStep() int64 {
	page := int64(mmapfile.PageSize)
	eighth := (c.SegmentBytes/8 + page - 1) / page * page
	return min(int64(allocStep), max(eighth, page))
}

// stepFor returns n as an allocation step: whole pages, at least one, at
// most allocStep.
func (c *Config) stepFor(n int64) int64 {
	page := int64(mmapfile.PageSize)
	return min(c.allocStep(), max((n+page-1)/page*page, page))
}

// grow makes sure the .log file is allocated at least to end (capped at the
// mapped capacity), in whole steps. The caller holds growMu (see
// growLocked). A full disk is an error here, before any byte is written
// there.
func (s *Segment) grow(end int64) error {
	w := s.w
	have := w.alloc.Load()
	if end <= have {
		return nil
	}
	step := w.step.Load()
	// Never past SegmentBytes ahead of the records: only a record larger
	// than the segment (the writer's own grow) takes the file beyond it.
	want := min((end+step-1)/step*step, w.capacity, max(s.cfg.SegmentBytes, end))
	if want < end {
		want = end
	}
	if err := growTo(s.cfg, s.f, have, want); err != nil {
		return err
	}
	if s.cfg.Ranges != nil {
		// The read-only mapping read zeros past the file's end (see
		// openWriter): it maps the file again as far as it now reaches.
		if err := s.cfg.Ranges.MapFrom(s.ro, s.f, int(have), int(want)); err != nil {
			return err
		}
	}
	w.alloc.Store(want)
	return nil
}

// writerGrow is grow for the writer, which met the end of the allocated
// file: the prefaulter, if any, is behind a fast writer, so the step
// doubles first (up to Config's largest). A file that grows in small steps
// right ahead of the writer's stores gets small folios, mapped in 4 KiB
// pages, and on the project's machine the first store into each such page
// costs a fault; in whole 2 MiB steps the pages are mapped as large
// folios. (A writer that outran the prefaulter at the start of a busy log,
// before its distance grew, met such pages for megabytes and the append
// p99 went from 0.4 to 5-12 us in a third of the runs on a loaded machine.)
func (s *Segment) writerGrow(end int64) error {
	w := s.w
	w.step.Store(min(2*w.step.Load(), s.cfg.allocStep()))
	return s.growLocked(end)
}

// growLocked is grow under growMu.
func (s *Segment) growLocked(end int64) error {
	s.growMu.Lock()
	defer s.growMu.Unlock()
	return s.grow(end)
}

func (w *writer) close() error {
	var errs []error
	for _, f := range []*os.File{w.idxF, w.timF} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	w.idxF, w.timF = nil, nil
	return errors.Join(errs...)
}

func (c *Config) nowMillis() int64 {
	if c.NowMillis != nil {
		return c.NowMillis()
	}
	return time.Now().UnixMilli()
}

func (c *Config) openFile(path string, flag int) (*os.File, error) {
	mode := c.FileMode
	if mode == 0 {
		mode = 0o600
	}
	return regfile.Open(path, flag, mode)
}

// Create starts a new, empty active segment at base: three files
// preallocated and mapped. A full disk is an error here, never a fault
// later. On error no file is left behind.
func Create(cfg *Config, base uint64) (*Segment, error) {
	return create(&Segment{cfg: cfg, base: base})
}

// Prepare creates the files of a next active segment ahead of time, under
// the names of PreparedPrefix, preallocated and mapped like Create's, for
// Activate to name once its base is known. It exists so that a roll costs a
// few renames instead of creating, allocating and mapping files while an
// appender waits. Files of an earlier Prepare that were never activated
// (a crash) are replaced.
func Prepare(cfg *Config) (*Segment, error) {
	s := &Segment{cfg: cfg, prepared: true}
	for _, suffix := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix} {
		_ = os.Remove(s.path(suffix))
	}
	return create(s)
}

// Activate names the .log file of a prepared segment after base and makes
// it an empty active segment at base, as if Create(cfg, base) had made it,
// but for its index files: they keep their prepared names until
// NameIndexes, which the caller runs after it (the log runs it in the
// background, off the append path: a roll that renamed all three files
// held the append lock through three renames). Nothing but the writer
// uses the index files by name while it appends, so the writer goes on at
// once. The order keeps the rule readers rely on: an index file is never
// there without its .log (a reader that lists the directory in between
// sees a segment whose index files are not there yet, which it treats as
// a segment without an index: its lookups walk the records). A crash in
// between leaves a segment without index files, rebuilt when needed, and
// prepared index files, which a writable open removes. On error the files
// keep their prepared names: the caller closes the segment and removes
// them.
func (s *Segment) Activate(base uint64) error {
	if !s.prepared {
		return errors.New("segment: activate: not a prepared segment")
	}
	named := &Segment{cfg: s.cfg, base: base}
	if _, err := os.Lstat(named.path(LogSuffix)); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("segment: activate: %s already exists (%v)", named.path(LogSuffix), err)
	}
	// The prepared names are fixed: make sure they still name this
	// segment's files (the caller never prepares while it activates).
	if st, err := os.Stat(s.path(LogSuffix)); err != nil || !s.sameFile(st) {
		return fmt.Errorf("segment: activate: %s is not the prepared file (%v)", s.path(LogSuffix), err)
	}
	if err := os.Rename(s.path(LogSuffix), named.path(LogSuffix)); err != nil {
		return fmt.Errorf("segment: activate: %w", err)
	}
	s.indexPending.Store(true)
	s.prepared = false
	s.base = base
	// The open file keeps the name it was opened with (os.File.Name,
	// used in errors and by hooks): give it the new one.
	s.f = renamed(s.f, s.path(LogSuffix))
	s.publishEnd(0, base)
	s.w.next, s.w.lastPos = base, -1
	return nil
}

// IndexPending reports whether the segment's index files still have their
// prepared names (see Activate).
func (s *Segment) IndexPending() bool { return s.indexPending.Load() }

// NameIndexes gives the index files of a segment that Activate named their
// segment's names, the offset index first. It may run beside appends (the
// writer uses the index files through their mappings only), but not beside
// Seal or Close. Seal runs it itself if it has not run. A file that cannot
// be renamed (removed by hand, say) is reported; the segment goes on with
// its mapping, and its index is rebuilt from the log at the next open.
func (s *Segment) NameIndexes() error {
	s.nameMu.Lock()
	defer s.nameMu.Unlock()
	if !s.indexPending.Load() {
		return nil
	}
	var errs []error
	for _, suffix := range []string{IndexSuffix, TimeIndexSuffix} {
		if err := os.Rename(s.path(suffix), filepath.Join(s.cfg.Dir, Name(s.base, suffix))); err != nil {
			errs = append(errs, fmt.Errorf("segment: name index: %w", err))
		}
	}
	s.indexPending.Store(false)
	if w := s.w; w != nil {
		w.idxF = renamed(w.idxF, s.path(IndexSuffix))
		w.timF = renamed(w.timF, s.path(TimeIndexSuffix))
	}
	return errors.Join(errs...)
}

// RemoveFiles removes the files of a segment that was never published (a
// prepared one that is given up, or one whose creation failed halfway),
// index files first. The caller has closed it.
func (s *Segment) RemoveFiles() {
	for _, suffix := range []string{TimeIndexSuffix, IndexSuffix, LogSuffix} {
		_ = os.Remove(s.path(suffix))
	}
}

func create(s *Segment) (*Segment, error) {
	cfg, base := s.cfg, s.base
	s.publishEnd(0, base)
	s.refs.Store(1)
	created := make([]string, 0, 3)
	fail := func(err error) (*Segment, error) {
		s.abandon()
		// Index files first, as RemoveFiles does: an index file is never
		// there without its .log.
		for _, p := range slices.Backward(created) {
			_ = os.Remove(p)
		}
		return nil, err
	}
	if s.keepSize > 0 {
		created = append(created, s.path(LogSuffix)) // reused: see PrepareRecycled
	}
	for _, suffix := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix} {
		if suffix == LogSuffix && s.keepSize > 0 {
			continue
		}
		if suffix != LogSuffix {
			// Index files without their .log are leftovers of a crash
			// (or of a removal by hand): replaced, never reused. They are
			// unlinked rather than truncated, so that a reader that still
			// maps one keeps its bytes.
			_ = os.Remove(s.path(suffix))
		}
		f, err := cfg.openFile(s.path(suffix), os.O_RDWR|os.O_CREATE|os.O_EXCL)
		if err != nil {
			return fail(fmt.Errorf("segment: create: %w", err))
		}
		created = append(created, f.Name())
		_ = f.Close()
	}
	if err := s.openWriter(); err != nil {
		return fail(err)
	}
	s.w.next, s.w.lastPos = base, -1
	return s, nil
}

// openWriter opens and maps the three files of an active segment for
// writing, growing each to its capacity. The index view starts with zero
// published entries; recovery publishes what it trusts.
func (s *Segment) openWriter() error {
	cfg := s.cfg
	w := &writer{spacer: sparseidx.Spacer{Interval: cfg.IndexInterval}}
	w.step.Store(cfg.stepFor(startStep))
	if s.prepared {
		// Made ahead for a busy writer: allocated in whole steps from
		// the first. Grown from a first step of 128 KiB, the first 2 MiB
		// of a prepared segment ended up mapped in 4 KiB pages (smaps:
		// not FilePmdMapped), whose first stores cost the writer a
		// fault each on the project's machine.
		w.step.Store(cfg.allocStep())
	}
	s.w = w
	f, err := cfg.openFile(s.path(LogSuffix), os.O_RDWR)
	if err != nil {
		return fmt.Errorf("segment: open: %w", err)
	}
	s.f = f
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("segment: stat: %w", err)
	}
	s.fileID = fileIdentity(st)
	w.capacity = max(cfg.capacity(), st.Size())
	w.alloc.Store(st.Size())
	if st.Size() == 0 {
		// A new file: its first step now, so that a full disk fails the
		// creation; the rest as the writer and the prefaulter need it.
		if err := s.growLocked(1); err != nil {
			return err
		}
	} else if err := growTo(cfg, f, 0, st.Size()); err != nil {
		// A file found at a size may hold holes within it (a copy by a
		// tool that keeps files sparse makes its zeros holes): every
		// block below alloc is allocated before the mappings touch it.
		return err
	}
	if s.ro, err = s.mapReaders(f, w.capacity); err != nil {
		return err
	}
	if s.cfg.Ranges != nil {
		// The mapping may take over a range where a stale body of a
		// dropped segment still points: past the file's end (it grows in
		// steps) that body must read zeros, never fault. grow maps the
		// file back as it grows.
		if err := s.cfg.Ranges.ZeroFrom(s.ro, int(w.alloc.Load())); err != nil {
			return err
		}
	}
	size, err := mmapfile.Len(w.capacity)
	if err != nil {
		return fmt.Errorf("segment: map %s: %w", f.Name(), err)
	}
	if s.rw, err = mmapfile.Map(f, size, true); err != nil {
		return err
	}
	// Large folios: the file system may back the mapping with huge pages,
	// so one page fault maps many pages at once. Measured on the project's
	// machine: 1 KiB appends went from about 430 MB/s to 1.1 GB/s. A hint;
	// kernels and file systems without support ignore it.
	if !cfg.SmallPages {
		_ = mmapfile.Advise(s.rw, 0, len(s.rw), mmapfile.HugePage)
		_ = mmapfile.Advise(s.ro, 0, len(s.ro), mmapfile.HugePage)
	}
	// Sized for SegmentBytes (see indexCapacity), or for the file when it
	// is larger: a segment written under a larger SegmentBytes holds
	// records past the current one, and its rebuilt index needs them all.
	w.idxCap = cfg.indexCapacity(max(min(w.capacity, cfg.SegmentBytes), st.Size()))
	x := &index{}
	if w.idxF, x.offMap, err = s.mapIndexFile(IndexSuffix, w.idxCap*sparseidx.OffsetEntrySize); err != nil {
		return err
	}
	if w.timF, x.timMap, err = s.mapIndexFile(TimeIndexSuffix, w.idxCap*sparseidx.TimeEntrySize); err != nil {
		// Not yet in s.idx, which abandon unmaps: a full disk failed
		// the time index after the offset index was mapped, and each
		// such create left a mapping of a removed file (its blocks
		// held until the process exits).
		_ = mmapfile.Unmap(x.offMap)
		return err
	}
	x.off = sparseidx.Offsets{Buf: x.offMap}
	x.tim = sparseidx.Times{Buf: x.timMap}
	s.idx.Store(x)
	s.checked.Store(true)
	return nil
}

func growTo(cfg *Config, f *os.File, have, want int64) error {
	if have >= want {
		return nil
	}
	if err := cfg.allocate(f, have, want-have); err != nil {
		return fmt.Errorf("segment: preallocate %s: %w", f.Name(), err)
	}
	return nil
}

// mapIndexFile opens an index file for writing, allocates it to size
// bytes and maps it.
func (s *Segment) mapIndexFile(suffix string, size int) (*os.File, []byte, error) {
	f, err := s.cfg.openFile(s.path(suffix), os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, nil, fmt.Errorf("segment: open index: %w", err)
	}
	st, err := f.Stat()
	if err == nil && st.Size() > s.indexFileMax(suffix) {
		// Larger than any index of the segment can be (a sparse file of
		// gigabytes put in its place, say): nothing past the bound is an
		// entry. Cut there rather than allocate and map it all.
		if err = f.Truncate(s.indexFileMax(suffix)); err == nil {
			st, err = f.Stat()
		}
	}
	if err == nil {
		if st.Size() > int64(size) {
			size = int(st.Size())
		}
		// From 0: a file found at its size may hold holes (see
		// openWriter).
		err = growTo(s.cfg, f, 0, int64(size))
	}
	var m []byte
	if err == nil {
		m, err = mmapfile.Map(f, size, true)
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, m, nil
}

// abandon releases whatever a failed open or create had acquired.
func (s *Segment) abandon() {
	if s.w != nil {
		_ = s.w.close()
	}
	s.finish()
}

// Room reports whether a record of size bytes belongs in this segment under
// the roll rule of FORMAT.md: it does when the segment is empty, or when it
// still fits within SegmentBytes.
func (s *Segment) Room(size int) bool {
	w := s.w
	if w.pos == 0 {
		return int64(size) <= w.capacity
	}
	limit := min(s.cfg.SegmentBytes, w.capacity)
	return w.pos+int64(size) <= limit
}

// AppendBatch writes records for bodies (with attrs[i], nil for none; attrs
// nil for no attributes at all) at the end of the active segment: as many as
// the roll rule lets in, at least one when it lets the first in. sizes are
// the records' sizes (record.Size). Under WriteThrough they are encoded into
// one buffer and written with one pwrite, then published together; through
// the mapping they are appended one by one. It returns how many were
// written. The caller checked Room for the first and serializes appends.
func (s *Segment) AppendBatch(attrs []*record.Attrs, bodies [][]byte, sizes []int) (int, error) {
	at := func(i int) *record.Attrs {
		if attrs == nil {
			return nil
		}
		return attrs[i]
	}
	w := s.w
	if !s.cfg.WriteThrough {
		n := 0
		for n < len(bodies) && (n == 0 || s.Room(sizes[n])) {
			if _, _, err := s.Append(at(n), bodies[n]); err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}
	// How many fit: the roll rule, record by record.
	limit := min(s.cfg.SegmentBytes, w.capacity)
	total, n := int64(0), 0
	for n < len(bodies) {
		end := w.pos + total + int64(sizes[n])
		if n > 0 && end > limit || end > w.capacity {
			break
		}
		total += int64(sizes[n])
		n++
	}
	if n == 0 {
		return 0, io.ErrShortBuffer
	}
	if end := w.pos + total; end > w.alloc.Load() {
		if err := s.writerGrow(end); err != nil {
			return 0, err
		}
	}
	if int64(cap(w.buf)) < total {
		w.buf = make([]byte, total)
	}
	buf := w.buf[:total]
	p := 0
	for i := range n {
		k, err := record.Encode(buf[p:p+sizes[i]], w.next+uint64(i), at(i), bodies[i])
		if err != nil {
			return 0, err
		}
		p += k
	}
	if _, err := s.f.WriteAt(buf, w.pos); err != nil {
		return 0, fmt.Errorf("segment: write %s at %d: %w", s.f.Name(), w.pos, err)
	}
	x := s.idx.Load()
	for i := range n {
		if w.spacer.Next(sizes[i]) {
			s.addEntry(x, w.next, w.pos)
		}
		w.lastPos = w.pos
		w.pos += int64(sizes[i])
		w.next++
	}
	s.end.Store(w.pos)
	s.next.Store(w.next)
	return n, nil
}

// Append writes one record at the end of the active segment and publishes
// it. The caller checked Room and serializes appends. It returns the
// record's position.
func (s *Segment) Append(attrs *record.Attrs, body []byte) (uint64, int64, error) {
	return s.AppendSized(attrs, body, record.Size(len(body), attrs))
}

// AppendSized is Append of a record whose size the caller has worked out
// (record.Size(len(body), attrs)).
func (s *Segment) AppendSized(attrs *record.Attrs, body []byte, size int) (uint64, int64, error) {
	w := s.w
	id, pos := w.next, w.pos
	n, err := s.put(id, pos, size, attrs, body)
	if err != nil {
		return 0, 0, err
	}
	x := s.idx.Load()
	if w.spacer.Next(n) {
		s.addEntry(x, id, pos)
	}
	w.lastPos = pos
	w.pos = pos + int64(n)
	w.next = id + 1
	s.end.Store(w.pos)
	s.next.Store(w.next)
	return id, pos, nil
}

// put writes the record at pos, of size bytes (record.Size): through the writable mapping, or with one
// pwrite under WriteThrough. Either way the bytes are in the page cache, and
// so in the readers' mapping, when it returns.
func (s *Segment) put(id uint64, pos int64, size int, attrs *record.Attrs, body []byte) (int, error) {
	w := s.w
	if end := pos + int64(size); end > w.alloc.Load() {
		if end > w.capacity {
			return 0, io.ErrShortBuffer
		}
		if err := s.writerGrow(end); err != nil {
			return 0, err
		}
	}
	if !s.cfg.WriteThrough {
		return record.EncodeSized(s.rw[pos:pos+int64(size)], id, attrs, body)
	}
	if cap(w.buf) < size {
		w.buf = make([]byte, size)
	}
	n, err := record.EncodeSized(w.buf[:size], id, attrs, body)
	if err != nil {
		return 0, err
	}
	if _, err := s.f.WriteAt(w.buf[:n], pos); err != nil {
		return 0, fmt.Errorf("segment: write %s at %d: %w", s.f.Name(), pos, err)
	}
	return n, nil
}

// addEntry writes one offset-index and one time-index entry for the record
// id at pos, then publishes it. A full index (impossible under the sizing
// rule, but never trusted) drops the entry: the index is only a cache.
func (s *Segment) addEntry(x *index, id uint64, pos int64) {
	i := x.entries()
	if i >= x.off.Cap() || i >= x.tim.Cap() {
		return
	}
	ms := s.cfg.nowMillis()
	if ms < s.w.lastMs {
		ms = s.w.lastMs
	}
	s.w.lastMs = ms
	rel := uint32(id - s.base)
	_ = x.off.Put(i, rel, uint32(pos))
	_ = x.tim.Put(i, ms, rel)
	x.n.Store(int64(i + 1))
}

// Prefault takes the page faults of the next ahead bytes past the end, so
// that the writer's copies do not pay them, allocating the file in steps of
// step bytes (at most Config's largest step, at least the step the writer
// raised it to) as it goes, the writer's own growth included. It is called from a background goroutine and works in
// small chunks, so that Seal never waits long for it; it skips whatever the
// writer has already passed. It yields its P after each chunk (see
// yieldChunk).
func (s *Segment) Prefault(ahead, step int64) {
	s.popMu.Lock()
	if s.w != nil {
		// Never below a step the writer raised it to (writerGrow).
		s.w.step.Store(max(s.w.step.Load(), s.cfg.stepFor(step)))
	}
	s.popMu.Unlock()
	for s.prefaultChunk(ahead, true) {
		yieldChunk()
	}
}

// TrimAhead gives back what the active segment's .log file holds past its
// records beyond keep bytes (whole pages): the file is cut there, which
// frees its blocks and its pages in the page cache, and grows again in
// steps as records come. It returns the bytes cut. A file is never cut
// below the end of its records (readers in other processes rely on that)
// nor below a reused file's old size (see Seal). The caller serializes it
// with appends (it holds the log's append lock): no store into the mapping
// may be in flight past the cut.
func (s *Segment) TrimAhead(keep int64) (int64, error) {
	s.popMu.Lock()
	defer s.popMu.Unlock()
	s.growMu.Lock()
	defer s.growMu.Unlock()
	w := s.w
	if w == nil || s.rw == nil {
		return 0, nil
	}
	page := int64(mmapfile.PageSize)
	have := w.alloc.Load()
	want := max((w.pos+keep+page-1)/page*page, s.keepSize)
	if want >= have {
		return 0, nil
	}
	if s.cfg.Ranges != nil {
		// A stale slice may point past the cut: it must read zeros
		// there, never fault (grow maps the file back).
		if err := s.cfg.Ranges.ZeroFrom(s.ro, int(want)); err != nil {
			return 0, fmt.Errorf("segment: trim %s: %w", s.f.Name(), err)
		}
	}
	if err := s.f.Truncate(want); err != nil {
		if s.cfg.Ranges != nil {
			_ = s.cfg.Ranges.MapFrom(s.ro, s.f, int(want), int(have))
		}
		return 0, fmt.Errorf("segment: trim %s: %w", s.f.Name(), err)
	}
	w.alloc.Store(want)
	w.populated = min(w.populated, want)
	w.step.Store(s.cfg.stepFor(max(keep/2, startStep)))
	return have - want, nil
}

// yieldChunk yields the P of a goroutine that faults in or zeroes memory in
// the background, between chunks. Such a goroutine runs for milliseconds
// without a call that would let the scheduler in (a fault-in of 8 MiB
// ahead, a reused file's 64 MiB made zero), and an appender preempted
// meanwhile (every 10 ms, by the Go scheduler) waited for a P until it was
// done: in a queue's steady state, 18-72 of the sender's waits over 1 ms
// per 4 GiB were that, against 2-8 with the yield (execution traces,
// bench/README.md "The sender's waits").
func yieldChunk() { runtime.Gosched() }

// Preallocate allocates the first n bytes of the .log file of an active or
// prepared segment (never past SegmentBytes).
func (s *Segment) Preallocate(n int64) error {
	s.popMu.Lock()
	defer s.popMu.Unlock()
	if s.w == nil {
		return errors.New("segment: preallocate: not an active segment")
	}
	return s.growLocked(min(n, s.w.capacity, s.cfg.SegmentBytes))
}

// PrefaultPrepared faults in the allocated part of a prepared segment, up
// to ahead bytes, while more (asked before each chunk) reports true. A
// roll may take the segment meanwhile, and Activate then runs beside the
// chunk in flight: the chunks never grow the file (see Preallocate), so
// they never touch the files Activate renames and replaces.
func (s *Segment) PrefaultPrepared(ahead int64, more func() bool) {
	for more() && s.prefaultChunk(ahead, false) {
		yieldChunk()
	}
}

// prefaultChunk takes the faults of the next chunk; it reports whether
// there is more to do. The read-only mapping is touched too (so that
// readers of this process fault no more than the writer), with a
// reference held (Close may run meanwhile: the last reference unmaps) and
// under popMu (Seal trims the file under it).
func (s *Segment) prefaultChunk(ahead int64, grow bool) bool {
	const chunk = 64 << 10
	page := int64(mmapfile.PageSize)
	if !s.Acquire() {
		return false
	}
	defer s.Release() // after popMu is let go: the last one unmaps under it
	s.popMu.Lock()
	defer s.popMu.Unlock()
	w := s.w
	if w == nil || s.rw == nil {
		return false
	}
	end := s.end.Load()
	// Records stay below SegmentBytes (but one larger than a segment, for
	// which the writer grows the file itself): faulting, and so
	// allocating, past it only took disk (a segment of 64 KiB took 128).
	target := min(end+ahead, w.capacity, max(s.cfg.SegmentBytes, end))
	if !grow {
		target = min(target, w.alloc.Load()) // only what is allocated
	}
	from := max(w.populated, end&^(page-1))
	if from >= target {
		s.populateIndex() // a reused file comes populated
		return false
	}
	n := min(chunk, target-from)
	if grow && s.growLocked(from+n) != nil {
		// A full disk: the writer meets the error when it gets
		// there, and the next kick tries again.
		return false
	}
	_ = mmapfile.Populate(s.rw, int(from), int(n))
	touchPages(s.ro, from, n)
	s.populateIndex()
	w.populated = from + n
	return true
}

// populateIndex takes the write faults of the pages of the index files,
// all of them, once per segment (they are a few hundred KiB for 64 MiB).
// Without it every 512th offset entry and every 341st time entry started
// a page the writer faulted in itself: about 20 µs each on the project's
// machine, 0.12% of 1 KiB appends, and with them the append p99.9. The caller holds popMu and a
// reference. The index files are allocated to their capacity when the
// segment opens, so nothing here is past their end; a touch changes no
// byte (see mmapfile.Populate).
func (s *Segment) populateIndex() {
	x := s.idx.Load()
	if s.w.idxPopulated || x == nil || x.offMap == nil || x.timMap == nil {
		return
	}
	s.w.idxPopulated = true
	_ = mmapfile.Populate(x.offMap, 0, len(x.offMap))
	_ = mmapfile.Populate(x.timMap, 0, len(x.timMap))
}

// Populated returns how many bytes of the active mapping have been
// pre-faulted (for tests and metrics).
func (s *Segment) Populated() int64 {
	s.popMu.Lock()
	defer s.popMu.Unlock()
	if s.w == nil {
		return 0
	}
	return s.w.populated
}

// Sync makes the records written so far durable: fdatasync of the .log file
// writes back the pages dirtied through the mapping.
func (s *Segment) Sync() error {
	if s.f != nil {
		return s.cfg.datasync(s.f)
	}
	// A sealed segment opened at Open, or evicted since its seal, keeps
	// no descriptor.
	f, err := regfile.Open(s.path(LogSuffix), os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("segment: sync: %w", err)
	}
	defer f.Close()
	return s.cfg.datasync(f)
}

// Seal trims the active segment and its indexes to their exact sizes, syncs
// them when sync is set, and unmaps the writable mapping. Readers keep their
// read-only views. After Seal the segment never changes again, and joins
// its log's map cache like a segment opened sealed.
func (s *Segment) Seal(sync bool) error {
	if err := s.seal(sync); err != nil {
		return err
	}
	s.joinMapCache()
	return nil
}

// joinMapCache makes a segment sealed in this process lazy: from here on
// the log's MapCache may unmap it while no reader holds it, and maps it
// again on use, as it does a segment opened sealed. Without it a writer
// that rolls small segments for long kept every one it sealed mapped
// (three mappings each, toward vm.max_map_count), whatever
// MaxMappedSegments said. Its descriptor stays open until an eviction
// (see tryEvict): a sync of the sealed file soon after uses it.
func (s *Segment) joinMapCache() {
	c := s.cfg.Maps
	if c == nil || s.lazy.Load() {
		return
	}
	s.mu.Lock()
	s.keptEntries = s.idx.Load().n.Load()
	s.isMapped.Store(true)
	s.touched.Store(true)
	s.lazy.Store(true)
	s.mu.Unlock()
	c.add(s)
}

func (s *Segment) seal(sync bool) error {
	// Sealed index files have their segment's names (see Activate).
	_ = s.NameIndexes()
	s.popMu.Lock()
	defer s.popMu.Unlock()
	w := s.w
	x := s.idx.Load()
	n := int64(x.entries())
	if s.cfg.Ranges != nil {
		// A stale slice may point past the end about to be cut: it must
		// read zeros there, never fault.
		if err := s.cfg.Ranges.ZeroFrom(s.ro, int(w.pos)); err != nil {
			return fmt.Errorf("segment: seal %s: %w", s.f.Name(), err)
		}
	}
	// A reused file keeps at least its old size (zeros past the records):
	// a reader in another process may still map it as the segment it was.
	if err := s.f.Truncate(max(w.pos, s.keepSize)); err != nil {
		return fmt.Errorf("segment: seal %s: %w", s.f.Name(), err)
	}
	if err := w.idxF.Truncate(n * sparseidx.OffsetEntrySize); err != nil {
		return fmt.Errorf("segment: seal index: %w", err)
	}
	if err := w.timF.Truncate(n * sparseidx.TimeEntrySize); err != nil {
		return fmt.Errorf("segment: seal time index: %w", err)
	}
	if sync {
		for _, f := range []*os.File{s.f, w.idxF, w.timF} {
			if err := s.cfg.datasync(f); err != nil {
				return err
			}
		}
	}
	if err := mmapfile.Unmap(s.rw); err != nil {
		return err
	}
	s.rw = nil
	err := w.close()
	s.w = nil
	s.recEnd.Store(s.next.Load())
	s.sealed.Store(true)
	return err
}
