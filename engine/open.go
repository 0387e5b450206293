package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/pagelog/pagelog/internal/addrspace"
	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/internal/segment"
)

// Open opens (creating it if needed) the log in dir for appending and
// reading. Zero Options mean the defaults; for an existing log, zero
// settings mean those stored in its log.meta.
func Open(dir string, opts Options) (*Log, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	if opts.ReadOnly {
		return OpenReadOnly(dir, opts)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, opts.DirMode); err != nil {
		return nil, fmt.Errorf("pagelog: create %s: %w", dir, err)
	}
	lock, err := lockDir(dir, opts.FileMode)
	if err != nil {
		return nil, err
	}
	l, err := open(dir, opts, lock)
	if err != nil {
		_ = unlockAndClose(lock)
		return nil, err
	}
	return l, nil
}

// OpenReadOnly opens the log in dir for reading only. It takes no lock and
// never changes a file, so it may run beside a process that appends; it
// sees the records that were whole when it opened, whatever that process
// was doing (appending, rolling, sealing, dropping old segments). A
// directory that holds no log gets an error wrapping ErrNoLog.
func OpenReadOnly(dir string, opts Options) (*Log, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.ReadOnly = true
	opts = opts.withDefaults()
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("pagelog: open %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("pagelog: open %s: not a directory", dir)
	}
	return open(dir, opts, nil)
}

// IsLog reports whether dir holds a log: a log.meta file or a segment
// file. It is what tools that must not create a log check first.
func IsLog(dir string) (bool, error) {
	if st, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) || err == nil && !st.IsDir() {
		return false, nil
	}
	list, err := listDir(dir)
	if err != nil {
		return false, err
	}
	if len(list.bases) > 0 {
		return true, nil
	}
	_, err = os.Stat(filepath.Join(dir, metaName))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func open(dir string, opts Options, lock *os.File) (*Log, error) {
	start := time.Now()
	if opts.datasync == nil {
		// A test watching the syncs of dir (checkpoint.SetSyncHook); nil
		// in production.
		opts.datasync = checkpoint.SyncHook(dir)
	}
	list, err := listDir(dir)
	if err != nil {
		return nil, err
	}
	l := &Log{dir: dir, opts: opts, readOnly: opts.ReadOnly, lockFile: lock, stop: make(chan struct{})}
	l.cuts.Store(&cutHistory{})
	m, stored, trusted, err := l.settings(list.bases)
	if err != nil {
		return nil, err
	}
	l.meta = m
	l.maxBody = m.MaxRecordBytes
	if opts.MaxRecordBytes > 0 {
		l.maxBody = opts.MaxRecordBytes
	}
	var ranges *addrspace.Pool
	if opts.RetireMappings {
		ranges = rangesFor(dir)
	}
	maxLength := record.MaxLength(m.MaxRecordBytes)
	if !trusted && len(list.bases) > 0 {
		// No stored limit to bound record lengths by: only the files
		// bound them, so that no long record is called damaged.
		maxLength = record.LengthMask
	}
	l.cfg = &segment.Config{
		Dir:            dir,
		SegmentBytes:   m.SegmentBytes,
		IndexInterval:  m.IndexIntervalBytes,
		MaxLength:      maxLength,
		MaxRecord:      int(record.MaxLength(l.maxBody)) + 4,
		ReadOnly:       opts.ReadOnly,
		FileMode:       opts.FileMode,
		Ranges:         ranges,
		Maps:           &segment.MapCache{Max: opts.MaxMappedSegments},
		SmallPages:     opts.Sync == SyncAlways,
		KeepActiveSize: opts.RecycleSegments > 0 && opts.Sync != SyncAlways,
		WriteThrough:   opts.Sync == SyncAlways,
		Allocate:       opts.allocate,
		Datasync:       opts.datasync,
		NowMillis:      func() int64 { return opts.now().UnixMilli() },
	}
	if l.readOnly {
		l.recovery.Leftovers = list.leftovers
		err = l.openView()
	} else {
		err = l.openWritable(list, trusted, stored.IndexIntervalBytes != m.IndexIntervalBytes)
	}
	if err != nil {
		l.closeSegments()
		l.doneRanges()
		return nil, err
	}
	l.recovery.Took = time.Since(start)
	l.startBackground()
	return l, nil
}

// settings returns the settings of the log: log.meta's, with the non-zero
// Options applied. When log.meta is missing or damaged (trusted false) they
// are the defaults, with the first offset of the oldest segment; a
// damaged file is noted in the report, never a reason to fail.
func (l *Log) settings(bases []uint64) (m meta, stored meta, trusted bool, err error) {
	opts := l.opts
	m, hasMeta, err := readMeta(l.dir)
	var bad *checkpoint.BadFileError
	switch {
	case errors.Is(err, ErrNewerFile):
		return m, m, false, fmt.Errorf("%w; %s", err, l.dir)
	case errors.As(err, &bad):
		l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf("%s ignored (%s): settings taken from the segments", metaName, bad.Why))
	case err != nil:
		return m, m, false, err
	case !hasMeta && len(bases) == 0 && l.readOnly:
		return m, m, false, fmt.Errorf("%w: %s", ErrNoLog, l.dir)
	}
	trusted = hasMeta && err == nil
	if !trusted {
		m = defaultMeta()
		m.FirstOffset = opts.FirstOffset
		if len(bases) > 0 {
			m.FirstOffset = bases[0]
		}
	}
	newLog := !trusted && len(bases) == 0
	stored = m
	m = m.with(opts)
	if newLog && opts.MaxRecordBytes > 0 {
		// A new log stores the limit it is given, smaller ones included,
		// so that readers bound lengths by it.
		m.MaxRecordBytes = opts.MaxRecordBytes
	}
	if err := checkMappable(m, strconv.IntSize); err != nil {
		return m, stored, false, fmt.Errorf("pagelog: open %s: %w", l.dir, err)
	}
	if !l.readOnly && trusted && m != stored || !l.readOnly && newLog {
		if err := replaceFile(l.dir, metaName, m.encode(), opts.FileMode); err != nil {
			return m, stored, false, err
		}
	}
	if !l.readOnly {
		// After log.meta: a cursor opened in between has no identity
		// yet, and takes this one when next opened.
		if err := ensureLogID(l.dir, opts.FileMode, &l.recovery, newLog); err != nil {
			return m, stored, false, err
		}
	}
	return m, stored, trusted || newLog, nil
}

// with applies the non-zero settings of opts to the stored ones: they shape
// new segments only. The stored maximum record size never shrinks, so that
// records already written stay readable.
func (m meta) with(o Options) meta {
	if o.SegmentBytes > 0 {
		m.SegmentBytes = o.SegmentBytes
	}
	if o.IndexIntervalBytes > 0 {
		m.IndexIntervalBytes = o.IndexIntervalBytes
	}
	if o.MaxRecordBytes > m.MaxRecordBytes {
		m.MaxRecordBytes = o.MaxRecordBytes
	}
	return m
}

// dirList is what a log directory holds.
type dirList struct {
	bases     []uint64 // base offsets of the .log files, sorted
	leftovers []string // index files whose .log does not exist
	recycled  []string // dropped segment files kept for reuse (recycle.go)
}

// listDir lists the segment files of dir. Files that are not segment files
// (and directories) are left alone; a symbolic link, FIFO, socket or
// device under a segment file's name is an error (ErrNotRegular). One pass over the directory in its own order (a log of
// 10,000 segments has 30,000 names: os.ReadDir's sort of them by name was
// a tenth of an Open), the bases sorted after.
func listDir(dir string) (dirList, error) {
	d, err := os.Open(dir)
	var entries []fs.DirEntry
	if err == nil {
		entries, err = d.ReadDir(-1)
		_ = d.Close()
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return dirList{}, nil
		}
		return dirList{}, fmt.Errorf("pagelog: list %s: %w", dir, err)
	}
	var list dirList
	logs := make(map[uint64]bool)
	var indexes []string
	for _, e := range entries {
		name := e.Name()
		base, suffix, ok := segment.ParseName(name)
		if ok && !e.Type().IsRegular() && !e.IsDir() {
			// A FIFO or a link under a segment's name: never opened, and
			// never passed over as if the segment were not there. (A
			// directory is a foreign file, left alone.)
			return dirList{}, fmt.Errorf("pagelog: list %s: %w", dir,
				&regfile.TypeError{Path: filepath.Join(dir, name), Is: regfile.Kind(e.Type()), Want: "a regular file"})
		}
		if !ok || !e.Type().IsRegular() {
			if isRecycledName(name) && e.Type().IsRegular() {
				list.recycled = append(list.recycled, name)
			}
			continue
		}
		if suffix == segment.LogSuffix {
			list.bases = append(list.bases, base)
			logs[base] = true
		} else {
			indexes = append(indexes, name)
		}
	}
	for _, name := range indexes {
		base, _, _ := segment.ParseName(name)
		if logs[base] {
			continue
		}
		// Index files are created after their .log and removed before
		// it: one without its .log is a leftover, unless the .log was
		// created while the directory was being read (it is there now),
		// or the segment was being removed (the index file is gone now:
		// the .log goes last).
		if _, err := os.Stat(filepath.Join(dir, segment.Name(base, segment.LogSuffix))); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			list.leftovers = append(list.leftovers, name)
		}
	}
	slices.Sort(list.bases)
	return list, nil
}

// openWritable opens every segment of a log opened for writing: sealed ones
// read-only with their index checked lazily, the newest as the active one
// with its end recovered. Leftover index files are removed.
func (l *Log) openWritable(list dirList, trusted, newSpacing bool) error {
	bases := list.bases
	l.removePreparedLeftovers()
	l.removeRecycledLeftovers(list.recycled)
	for _, name := range list.leftovers {
		if err := os.Remove(filepath.Join(l.dir, name)); err == nil {
			l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf("removed %s: an index file without its segment", name))
		}
	}
	known := checkpointNext(l.dir)
	segs := make([]*segment.Segment, 0, len(bases)+1)
	l.segs.Store(&segs)
	if len(bases) == 0 {
		s, err := segment.Create(l.cfg, max(l.meta.FirstOffset, known))
		if err != nil {
			return err
		}
		if err := syncDir(l.dir); err != nil {
			_ = s.Close()
			return err
		}
		segs = append(segs, s)
		l.active = s
		l.publish(segs)
		l.next.Store(s.Next())
		l.recovery.Segments = 1
		return nil
	}
	for i, base := range bases[:len(bases)-1] {
		s, err := segment.OpenSealed(l.cfg, base, bases[i+1])
		if err != nil {
			return err
		}
		segs = append(segs, s)
		l.publish(segs)
	}
	s, rep, err := l.openActive(bases[len(bases)-1])
	if err != nil {
		return err
	}
	if s.Next() == s.Base() && len(segs) > 0 {
		// An empty newest segment after a sealed one whose records stop
		// short of it: a crash during a roll took the sealed segment's
		// unsynced tail. Its successor holds nothing, so the sealed
		// segment becomes the active one again and its tail is recovered,
		// instead of leaving offsets that can never be read.
		prev := segs[len(segs)-1]
		if c := prev.CheckIndex(); c.Next < prev.Next() {
			l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf(
				"empty segment %s removed: segment %s ends at offset %d, short of it (a crash during a roll)",
				segment.Name(s.Base(), segment.LogSuffix), c.Segment, c.Next))
			_ = s.Close()
			removeSegmentFiles(l.dir, s.Base())
			_ = syncDir(l.dir)
			_ = prev.Close()
			segs = segs[:len(segs)-1]
			bases = bases[:len(bases)-1]
			if s, rep, err = l.openActive(prev.Base()); err != nil {
				return err
			}
		}
	}
	l.recovery.Clean = rep.Clean
	// Nothing is known synced until this Log syncs: the last writer may have
	// used SyncNone. The first sync covers the sealed segments too.
	l.sync.setDurable(bases[0], s.Base(), min(rep.End, rep.RecoveryPoint))
	l.sync.pending = append([]*segment.Segment(nil), segs...)
	segs = append(segs, s)
	l.publish(segs)
	l.active = s
	l.next.Store(s.Next())
	l.recovery.Segments = len(segs)
	l.recovery.Active = rep
	l.recovery.TruncatedBytes = rep.TornBytes
	if rep.IndexRepaired {
		l.recovery.IndexesRebuilt++
	}
	if len(segs) > 1 && !rep.Clean {
		// After a clean close every seal had finished (Close waits for
		// the background one): the check, which maps the segment, is
		// only for a crash.
		l.checkLastSealed(segs[len(segs)-2])
	}
	if (newSpacing || !trusted) && s.Next() > s.Base() {
		// A segment's index has one spacing throughout. The active one was
		// written with another (or an unknown) spacing, and the walk above
		// may have added entries with the new one: it is rebuilt with the
		// spacing it is appended with from now on.
		n := s.RebuildIndex()
		l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf(
			"index of %s rebuilt with IndexIntervalBytes %d (%d entries)",
			segment.Name(s.Base(), segment.LogSuffix), l.meta.IndexIntervalBytes, n))
	}
	if err := l.skipLostOffsets(known); err != nil {
		return err
	}
	if !trusted {
		return l.storeSettings()
	}
	return nil
}

// skipLostOffsets makes sure no offset the checkpoint files know was used
// is given to a new record: when log.clean or log.recovery names an offset
// beyond the log's end (the newest segment file was removed, or its tail
// lost in a power failure under SyncNone), the log goes on in a new
// segment there, and the offsets in between are a missing range that
// Verify reports.
func (l *Log) skipLostOffsets(known uint64) error {
	s := l.active
	if known <= s.Next() {
		return nil
	}
	l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf(
		"offsets [%d, %d) lost: the checkpoint files say the log reached %d, its segments end at %d; new records start at %d",
		s.Next(), known, known, s.Next(), known))
	if _, err := l.rollTo(known); err != nil {
		return err
	}
	l.awaitSeal() // MissingUpTo marks a sealed segment
	s.MissingUpTo(known)
	l.next.Store(known)
	return nil
}

// openActive opens the newest segment for writing, with what the
// checkpoint files say of it.
func (l *Log) openActive(base uint64) (*segment.Segment, segment.Recovery, error) {
	hint, err := readHint(l.dir, base, &l.recovery)
	if err != nil {
		return nil, segment.Recovery{}, err
	}
	// From here on the marker would be stale: an append may follow.
	_ = os.Remove(filepath.Join(l.dir, cleanName))
	s, rep, err := segment.OpenActive(l.cfg, base, hint)
	if errors.Is(err, segment.ErrMisnamed) {
		return nil, rep, fmt.Errorf("%w; `pagelog recover` (engine.Recover) renames it back", err)
	}
	return s, rep, err
}

// checkLastSealed checks the segment sealed last: a crash during a roll can
// leave it untrimmed (its records, then zeros), which a writable open trims,
// index files included.
func (l *Log) checkLastSealed(s *segment.Segment) {
	rep := s.CheckIndex()
	if rep.IndexRepaired {
		l.recovery.IndexesRebuilt++
	}
	if cut, err := s.TrimSealed(); err == nil && cut > 0 {
		rep.ZeroedBytes = cut
	}
	if rep.IndexRepaired || rep.ZeroedBytes > 0 {
		l.recovery.Sealed = append(l.recovery.Sealed, rep)
	}
}

// storeSettings writes log.meta for a log that had none, or a damaged one,
// once its segments are open: the longest record bounds MaxRecordBytes, so
// that no record the log holds is ever called damaged for its length.
func (l *Log) storeSettings() error {
	longest := 0
	for _, s := range *l.segs.Load() {
		longest = max(longest, s.LongestBody())
	}
	if longest > l.meta.MaxRecordBytes {
		l.meta.MaxRecordBytes = min(longest, maxBodyLimit)
		l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf(
			"MaxRecordBytes raised to %d, the longest record the log holds", l.meta.MaxRecordBytes))
	}
	if err := replaceFile(l.dir, metaName, l.meta.encode(), l.opts.FileMode); err != nil {
		return err
	}
	l.recovery.Notes = append(l.recovery.Notes, metaName+" written")
	return nil
}

// listSegments returns the base offsets of the .log files in dir, sorted.
func listSegments(dir string) ([]uint64, error) {
	list, err := listDir(dir)
	return list.bases, err
}

// rangesFor returns the address-range pool of the log in dir: the same
// pool every time this log is opened in this process, and no other log's
// (see Options.RetireMappings and internal/addrspace). The Log ends its
// use of it when it closes (doneRanges).
func rangesFor(dir string) *addrspace.Pool {
	key, err := filepath.Abs(dir)
	if err != nil {
		key = dir
	}
	// The directory's device, inode and birth time: a directory removed
	// and made again at the same path (even with its inode number reused)
	// is another log, with other ranges.
	key += fmt.Sprintf("\x00%v", dirIdentity(dir))
	return addrspace.For(key)
}

// doneRanges ends the Log's use of its address-range pool, once its
// segments are closed: the pool gives back the address space its ranges
// hold past what the records took (see internal/addrspace).
func (l *Log) doneRanges() {
	if l.cfg != nil && l.cfg.Ranges != nil {
		l.cfg.Ranges.Done()
	}
}
