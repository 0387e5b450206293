package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/mmapfile"
	"github.com/pagelog/pagelog/sparseidx"
)

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
			if st, serr := os.Lstat(s.path(suffix)); errors.Is(err, os.ErrExist) && serr == nil && !st.Mode().IsRegular() {
				// Something else under the segment's name (a directory,
				// which the listing leaves alone as a foreign file): say
				// what, rather than "file exists".
				err = &regfile.TypeError{Path: s.path(suffix), Is: regfile.Kind(st.Mode()), Want: "a regular file (the log's next segment)"}
			}
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
