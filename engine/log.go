package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
)

// Log is a segmented, append-only log of records in a directory.
//
// Any number of goroutines may call Read, Records and OffsetForTime while
// others Append; appends are serialized inside the Log.
type Log struct {
	dir      string
	opts     Options
	meta     meta
	cfg      *segment.Config
	maxBody  int
	readOnly bool
	lockFile *os.File

	mu     sync.Mutex       // serializes appends, rolls and Close
	active *segment.Segment // the segment appended to (nil read-only)
	segs   atomic.Pointer[[]*segment.Segment]
	next   atomic.Uint64 // offset of the next record
	closed atomic.Bool

	sync syncState
	pre  prefaulter
	bg   sync.WaitGroup
	stop chan struct{}

	recovery Recovery
}

// SegmentRecovery tells what opening one segment found and did.
type SegmentRecovery = segment.Recovery

// Recovery reports what the last Open did.
type Recovery struct {
	Segments       int               // segments in the log
	Active         SegmentRecovery   // the walk of the active segment
	Sealed         []SegmentRecovery // sealed segments that were checked or repaired
	TruncatedBytes int64             // bytes of torn tail cut from the active segment
	IndexesRebuilt int               // segments whose index was repaired
	Clean          bool              // a clean-close marker was found and checked out
	Notes          []string          // checkpoint files that were ignored, and why
	Took           time.Duration
}

// Open opens (creating it if needed) the log in dir for appending and
// reading. Zero Options mean the defaults; for an existing log, zero
// settings mean those stored in its log.meta.
func Open(dir string, opts Options) (*Log, error) {
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
		_ = lock.Close()
		return nil, err
	}
	return l, nil
}

// OpenReadOnly opens the log in dir for reading only. It takes no lock and
// never changes a file, so it may run beside a process that appends; it
// sees the records that were whole when it opened.
func OpenReadOnly(dir string, opts Options) (*Log, error) {
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

func open(dir string, opts Options, lock *os.File) (*Log, error) {
	start := time.Now()
	m, hasMeta, err := readMeta(dir)
	if err != nil {
		return nil, err
	}
	bases, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	if !hasMeta {
		m = defaultMeta()
		if len(bases) == 0 {
			m.FirstOffset = opts.FirstOffset
		} else {
			m.FirstOffset = bases[0]
		}
	}
	stored := m
	m = m.with(opts)
	if !hasMeta && len(bases) == 0 && opts.MaxRecordBytes > 0 {
		// A new log stores the limit it is given, smaller ones included,
		// so that readers bound lengths by it.
		m.MaxRecordBytes = opts.MaxRecordBytes
	}
	l := &Log{
		dir: dir, opts: opts, meta: m, readOnly: opts.ReadOnly, lockFile: lock,
		stop: make(chan struct{}),
	}
	l.maxBody = m.MaxRecordBytes
	if opts.MaxRecordBytes > 0 {
		l.maxBody = opts.MaxRecordBytes
	}
	l.cfg = &segment.Config{
		Dir:           dir,
		SegmentBytes:  m.SegmentBytes,
		IndexInterval: m.IndexIntervalBytes,
		MaxLength:     record.MaxLength(m.MaxRecordBytes),
		MaxRecord:     int(record.MaxLength(l.maxBody)) + 4,
		ReadOnly:      opts.ReadOnly,
		FileMode:      opts.FileMode,
		Retire:        opts.retire,
		SmallPages:    opts.Sync == SyncAlways,
		WriteThrough:  opts.Sync == SyncAlways,
		Allocate:      opts.allocate,
		Datasync:      opts.datasync,
		NowMillis:     func() int64 { return opts.now().UnixMilli() },
	}
	if !l.readOnly && (!hasMeta || m != stored) {
		if err := replaceFile(dir, metaName, m.encode(), opts.FileMode); err != nil {
			return nil, err
		}
	}
	if err := l.openSegments(bases); err != nil {
		l.closeSegments()
		return nil, err
	}
	l.recovery.Took = time.Since(start)
	l.startBackground()
	return l, nil
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

// listSegments returns the base offsets of the .log files in dir, sorted.
// Files that are not segment files are left alone.
func listSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("pagelog: list %s: %w", dir, err)
	}
	var bases []uint64
	for _, e := range entries {
		if base, suffix, ok := segment.ParseName(e.Name()); ok && suffix == segment.LogSuffix && e.Type().IsRegular() {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// openSegments opens every segment: sealed ones read-only with their index
// checked lazily, the newest as the active one with its end recovered.
func (l *Log) openSegments(bases []uint64) error {
	segs := make([]*segment.Segment, 0, len(bases)+1)
	l.segs.Store(&segs)
	if len(bases) == 0 {
		if l.readOnly {
			l.next.Store(l.meta.FirstOffset)
			return nil
		}
		s, err := segment.Create(l.cfg, l.meta.FirstOffset)
		if err != nil {
			return err
		}
		if err := syncDir(l.dir); err != nil {
			_ = s.Close()
			return err
		}
		bases = append(bases, l.meta.FirstOffset)
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
			if !l.readOnly {
				removeSegmentFiles(l.dir, s.Base())
				_ = syncDir(l.dir)
			}
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
	if !l.readOnly {
		l.sync.pending = append([]*segment.Segment(nil), segs...)
	}
	segs = append(segs, s)
	l.publish(segs)
	if !l.readOnly {
		l.active = s
	}
	l.next.Store(s.Next())
	l.recovery.Segments = len(segs)
	l.recovery.Active = rep
	l.recovery.TruncatedBytes = rep.TornBytes
	if rep.IndexRepaired {
		l.recovery.IndexesRebuilt++
	}
	if len(segs) > 1 {
		l.checkLastSealed(segs[len(segs)-2])
	}
	return nil
}

// openActive opens the newest segment, with what the checkpoint files say
// of it when the log is writable.
func (l *Log) openActive(base uint64) (*segment.Segment, segment.Recovery, error) {
	var hint segment.Hint
	if !l.readOnly {
		hint = readHint(l.dir, base, &l.recovery)
		// From here on the marker would be stale: an append may follow.
		_ = os.Remove(filepath.Join(l.dir, cleanName))
	}
	return segment.OpenActive(l.cfg, base, hint)
}

// checkLastSealed checks the segment sealed last: a crash during a roll can
// leave it untrimmed (its records, then zeros), which a writable open trims.
func (l *Log) checkLastSealed(s *segment.Segment) {
	rep := s.CheckIndex()
	if rep.IndexRepaired {
		l.recovery.IndexesRebuilt++
	}
	if !l.readOnly {
		if st, err := os.Stat(s.Path()); err == nil && st.Size() > s.End() {
			if os.Truncate(s.Path(), s.End()) == nil {
				rep.ZeroedBytes = st.Size() - s.End()
			}
		}
	}
	if rep.IndexRepaired || rep.ZeroedBytes > 0 {
		l.recovery.Sealed = append(l.recovery.Sealed, rep)
	}
}

func (l *Log) publish(segs []*segment.Segment) {
	s := slices.Clip(segs)
	l.segs.Store(&s)
}

// Recovery returns the report of what Open found and did.
func (l *Log) Recovery() Recovery { return l.recovery }

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Close stops the background work, makes the log unusable and releases the
// segments. Records still held by callers stay valid until released. Under
// SyncAlways and SyncInterval, Close syncs what was written first.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed.Store(true)
	l.mu.Unlock()
	close(l.stop)
	l.bg.Wait()
	var errs []error
	if !l.readOnly && l.opts.Sync != SyncNone {
		if err := l.syncNow(); err != nil && !errors.Is(err, ErrSyncFailed) {
			errs = append(errs, err)
		}
	}
	l.sync.waitIdle()
	if !l.readOnly && l.sync.failed() == nil && l.active != nil {
		m := cleanMarker{Base: l.active.Base(), State: l.active.CleanState()}
		errs = append(errs, replaceFile(l.dir, cleanName, m.encode(), l.opts.FileMode))
	}
	errs = append(errs, l.closeSegments())
	if l.lockFile != nil {
		errs = append(errs, l.lockFile.Close())
	}
	return errors.Join(errs...)
}

func (l *Log) closeSegments() error {
	var errs []error
	if p := l.segs.Load(); p != nil {
		for _, s := range *p {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// MaxRecordBytes returns the largest body Append accepts.
func (l *Log) MaxRecordBytes() int { return l.maxBody }

// Next returns the offset the next appended record will get.
func (l *Log) Next() uint64 { return l.next.Load() }

// First returns the offset of the oldest record the log holds (equal to
// Next when the log is empty).
func (l *Log) First() uint64 {
	segs := *l.segs.Load()
	if len(segs) == 0 {
		return l.next.Load()
	}
	return segs[0].Base()
}
