package segment

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/mmapfile"
	"github.com/pagelog/pagelog/sparseidx"
)

// OpenActive opens the newest segment of a log and recovers its end. With
// cfg.ReadOnly it maps the files read-only, finds the end of the good
// records and keeps any index repair in memory, writing nothing; otherwise
// it prepares the segment for appending (see recoverActive).
func OpenActive(cfg *Config, base uint64, h Hint) (*Segment, Recovery, error) {
	if cfg.ReadOnly {
		return openActiveReadOnly(cfg, base)
	}
	s := &Segment{cfg: cfg, base: base}
	s.refs.Store(1)
	if err := s.openWriter(); err != nil {
		s.abandon()
		return nil, Recovery{}, err
	}
	rep, err := s.recoverActive(h)
	if err != nil {
		s.abandon()
		return nil, rep, err
	}
	return s, rep, nil
}

func openActiveReadOnly(cfg *Config, base uint64) (*Segment, Recovery, error) {
	s := &Segment{cfg: cfg, base: base, activeView: true}
	s.refs.Store(1)
	if err := s.mapReadOnly(); err != nil {
		s.finish()
		return nil, Recovery{}, err
	}
	if err := s.checkFirstID(s.ro); err != nil {
		s.finish()
		return nil, Recovery{}, err
	}
	start := time.Now()
	rep := s.checkIndex(int64(len(s.ro)), true)
	rep.Took = time.Since(start)
	return s, rep, nil
}

// OpenSealed opens a sealed segment read-only. next is the base offset of
// the segment after it. Its index is checked when first needed.
func OpenSealed(cfg *Config, base, next uint64) (*Segment, error) {
	s := &Segment{cfg: cfg, base: base}
	s.refs.Store(1)
	if err := s.mapReadOnly(); err != nil {
		s.finish()
		return nil, err
	}
	s.end.Store(int64(len(s.ro)))
	s.next.Store(next)
	s.sealed.Store(true)
	return s, nil
}

// mapReadOnly maps the .log file and whatever index files exist.
func (s *Segment) mapReadOnly() error {
	f, err := os.Open(s.path(LogSuffix))
	if err != nil {
		return fmt.Errorf("segment: open: %w", err)
	}
	st, err := f.Stat()
	var m []byte
	if err == nil {
		m, err = s.mapReaders(f, int(st.Size()))
	}
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("segment: open: %w", err)
	}
	s.ro = m
	// Large folios let one read fault map many pages (no writes go through
	// this mapping, so nothing is written back whole).
	_ = mmapfile.Advise(m, 0, len(m), mmapfile.HugePage)
	x := &index{}
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
func (s *Segment) mapReaders(f *os.File, size int) ([]byte, error) {
	if s.cfg.Retire {
		return mmapfile.MapRetirable(f, size)
	}
	return mmapfile.Map(f, size, false)
}

// lookupIndex returns the segment's index, checking it against the log the
// first time it is needed.
func (s *Segment) lookupIndex() *index {
	if !s.checked.Load() || s.distrust.Load() && s.sealed.Load() {
		s.mu.Lock()
		if !s.checked.Load() {
			s.checkIndex(s.end.Load(), false)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checked.Load() {
		return Recovery{Segment: Name(s.base, LogSuffix), End: s.end.Load(), Next: s.next.Load()}
	}
	return s.checkIndex(s.end.Load(), false)
}

// checkIndex verifies a read-only segment's index against its records up to
// end: the trusted entries, then a walk from the last of them that must not
// find a record owed an entry. Anything short of that rebuilds the index
// from the log. With active set, the walk also finds the end of the records
// (for a read-only view of an active segment). The caller holds s.mu or owns
// the segment alone.
func (s *Segment) checkIndex(end int64, active bool) Recovery {
	rep := Recovery{Segment: Name(s.base, LogSuffix)}
	x := s.idx.Load()
	buf := s.ro[:end]
	valid := x.off.Valid(end)
	n := s.trustedEntries(x, buf)
	pos, id := int64(0), s.base
	if n > 0 {
		rel, p := x.off.Entry(n - 1)
		pos, id = int64(p), s.base+uint64(rel)
	}
	sp := sparseidx.Spacer{Interval: s.cfg.IndexInterval}
	short := false
	r := s.walk(buf, pos, id, end, &sp, func(uint64, int64) { short = true })
	rep.Walked, rep.Records, rep.End, rep.Next = r.pos-pos, r.count, r.pos, r.next
	if active {
		s.end.Store(r.pos)
		s.next.Store(r.next)
		if r.stop != nil && !errors.Is(r.stop, record.ErrEnd) {
			rep.Cut, rep.CutReason = true, r.stop.Error()
		} else if r.stop != nil && s.tornAfterEnd(buf, r.pos) {
			rep.Cut, rep.CutReason = true, fmt.Sprintf("at position %d: a zero length field followed by the bytes of a record never finished", r.pos)
		}
	} else if r.stop != nil && errors.Is(r.stop, record.ErrEnd) && allZero(buf[r.pos:]) && r.next == s.next.Load() {
		// A sealed segment left untrimmed by a crash during a roll: its
		// records end early and zeros follow. Not damage.
		s.end.Store(r.pos)
		rep.End = r.pos
	}
	x.n.Store(int64(n))
	if short || n < valid {
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
	if !s.cfg.ReadOnly {
		s.writeIndexFiles(b.offs, b.tims)
	}
	s.retired = append(s.retired, old.offMap, old.timMap)
	s.idx.Store(x)
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
	buf := s.ro[:end]
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
	pos, id := int64(0), s.base
	for pos < end {
		r := s.walk(buf, pos, id, end, &b.spacer, add)
		if r.stop == nil || errors.Is(r.stop, record.ErrEnd) {
			break
		}
		pos, id = s.skipDamage(buf, r.pos, r.next)
	}
	return b
}

// RebuildIndex rebuilds the segment's index from its records whatever
// state it is in, and writes it back (a read-only log keeps it in memory).
// For the active segment, it rewrites the mapped index files in place; the
// caller must not be appending. It returns the number of entries.
func (s *Segment) RebuildIndex() int {
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

// skipDamage finds the first record after pos that verifies and whose id is
// at least id, and returns its position and id (end of buffer when none).
func (s *Segment) skipDamage(buf []byte, pos int64, id uint64) (int64, uint64) {
	limit := s.next.Load()
	for p := pos + 1; p+record.HeaderSize <= int64(len(buf)); p++ {
		_, _, _, got, _ := record.Header(buf[p:])
		if got < id || got >= limit {
			continue
		}
		if v, err := record.Decode(buf[p:], s.cfg.MaxLength); err == nil && v.ID == got {
			return p, got
		}
	}
	return int64(len(buf)), id
}

func (s *Segment) modTime() int64 {
	if st, err := os.Stat(s.path(LogSuffix)); err == nil {
		return st.ModTime().UnixMilli()
	}
	return s.cfg.nowMillis()
}

// writeIndexFiles replaces the index files of a sealed segment with rebuilt
// ones (temporary file, then rename). Failure leaves the old files: the
// index is a cache and the rebuilt copy is still served from memory.
func (s *Segment) writeIndexFiles(offs, tims []byte) {
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
		if err := os.WriteFile(tmp, f.data, mode); err != nil {
			_ = os.Remove(tmp)
			continue
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
		}
	}
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
