package segment

import (
	"errors"
	"fmt"
	"os"

	"github.com/pagelog/pagelog/sparseidx"
)

// Refresh looks for whole records appended to a view since it was opened
// or last refreshed, up to maxNext (the base of the segment after it, when
// one exists), and publishes them. It reports whether the view grew. The
// file is read with pread from the view's end on; a record that does not
// verify yet is left for a later call (it may be half written). A view
// whose file was replaced or removed does not grow.
func (s *Segment) Refresh(maxNext uint64) (bool, error) {
	if !s.activeView {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.Open(s.path(LogSuffix))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("segment: refresh: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !s.sameFile(st) {
		return false, nil
	}
	src := newFileSource(f)
	x := s.idx.Load()
	end, next := s.end.Load(), s.next.Load()
	// The sparse rule's count since the view's last entry.
	sp := sparseidx.Spacer{Interval: s.cfg.IndexInterval}
	if n := x.entries(); n > 0 {
		_, p := x.off.Entry(n - 1)
		sp.Count = int(end - int64(p))
	} else {
		sp.Count = int(end)
	}
	var offs, tims []byte
	now := s.cfg.nowMillis()
	entry := func(id uint64, p int64) {
		offs = appendOffset(offs, uint32(id-s.base), uint32(p))
		tims = appendTime(tims, now, uint32(id-s.base))
	}
	r := s.walk(src, end, next, int64(len(s.ro)), maxNext, &sp, entry)
	if src.err != nil {
		return false, fmt.Errorf("segment: refresh %s: %w", f.Name(), src.err)
	}
	if r.count == 0 {
		return false, nil
	}
	if len(offs) > 0 {
		n := x.entries()
		ms, _ := x.tim.Entry(n - 1)
		nx := &index{
			off: sparseidx.Offsets{Buf: append(append([]byte(nil), x.off.Buf[:n*sparseidx.OffsetEntrySize]...), offs...)},
			tim: sparseidx.Times{Buf: append(append([]byte(nil), x.tim.Buf[:n*sparseidx.TimeEntrySize]...), fixTimes(tims, ms)...)},
		}
		nx.n.Store(int64(n + len(offs)/sparseidx.OffsetEntrySize))
		s.idx.Store(nx)
	}
	s.publishEnd(r.pos, r.next)
	return true, nil
}

// MissingUpTo records that the offsets from the end of a view or a sealed
// segment up to next were used but are gone (a checkpoint file knows the
// log reached next): reads of them, and Verify, report a missing range. It
// must be called before the segment is read, and never on a view that is
// refreshed afterwards.
func (s *Segment) MissingUpTo(next uint64) {
	if (s.activeView || s.sealed.Load()) && next > s.next.Load() {
		s.recEnd.Store(min(s.recEnd.Load(), s.next.Load()))
		s.next.Store(next)
	}
}

// fixTimes raises the times of new entries to at least ms, so that the time
// index never goes back.
func fixTimes(tims []byte, ms int64) []byte {
	t := sparseidx.Times{Buf: tims}
	for i := range t.Cap() {
		m, rel := t.Entry(i)
		_ = t.Put(i, max(m, ms), rel)
	}
	return tims
}

// sameFile reports whether st describes the file the view mapped.
func (s *Segment) sameFile(st os.FileInfo) bool {
	return s.fileID == fileIdentity(st)
}

// View reports whether the segment is a read-only view of a segment another
// process may be writing (see OpenView).
func (s *Segment) View() bool { return s.activeView }
