package segment

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/mmapfile"
	"github.com/pagelog/pagelog/sparseidx"
)

// Refresh looks for whole records appended to a view since it was opened
// or last refreshed, up to maxNext (the base of the segment after it, when
// one exists), and publishes them. It reports whether the view grew. It is
// Follower.Poll with a follower of its own, for a single look.
func (s *Segment) Refresh(maxNext uint64) (bool, error) {
	fw := s.Follow()
	defer fw.Close()
	return fw.Poll(maxNext)
}

// Follower publishes the records another process appends to the segment of
// a view (see OpenView) after it was opened: what a read-only log that
// follows a writer uses for its newest segment.
//
// Two ways to look exist, and which one is used is the rule that keeps a
// reader from ever touching a mapped byte past the end of the file:
//
//   - Poll reads the file with pread from the view's end on: nothing is
//     known about those bytes (the writer may be appending there, or
//     trimming the file as it seals the segment), and pread returns short
//     where a mapped read would fault. It costs system calls.
//   - PollMapped reads the mapping up to a limit that the caller vouches
//     lies inside the file for as long as the mapping lives: an end of
//     whole records the writer itself published for this very file. A
//     writer never shrinks a .log file below the end of its whole records
//     (sealing trims it to exactly that end; Truncate replaces the file),
//     so those bytes stay. It makes no system call.
//
// Either way a record is published only once it is whole: its checksum
// verifies and its id is the one expected there. A Follower is not safe
// for concurrent use: its owner calls it under one lock.
type Follower struct {
	s        *Segment
	f        *os.File // the .log file, opened by the first Poll
	src      *fileSource
	size     int64 // the file's size when last seen
	replaced bool  // the file at the path is not the one the view mapped
	outgrown bool  // whole records lie past the end of the view's mapping

	offs, tims []byte // index entries found by a poll (reused)
}

// Follow returns a Follower of the view. It opens nothing yet.
func (s *Segment) Follow() *Follower {
	return &Follower{s: s}
}

// Segment returns the segment the Follower follows.
func (fw *Follower) Segment() *Segment { return fw.s }

// Close closes the file the Follower read.
func (fw *Follower) Close() error {
	if fw.f == nil {
		return nil
	}
	err := fw.f.Close()
	fw.f, fw.src = nil, nil
	return err
}

// open opens the .log file if it is not open yet, and checks that it is
// the file the view mapped.
func (fw *Follower) open() error {
	if fw.f != nil || fw.replaced {
		return nil
	}
	f, err := regfile.Open(fw.s.path(LogSuffix), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		fw.replaced = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("segment: follow: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("segment: follow: %w", err)
	}
	if !fw.s.sameFile(st) {
		_ = f.Close()
		fw.replaced = true
		return nil
	}
	fw.f, fw.src, fw.size = f, newFileSource(f), st.Size()
	fw.src.window = followWindow
	return nil
}

// followWindow is how much a follower's pread reads at a time: about one
// record appended since the last look, in one system call, without
// copying the 64 KiB window a walk over many records wants (a follower
// that is behind reads that much: the window grows as it walks).
const followWindow = 4 << 10

// Replaced reports whether the file at the view's path is no longer the one
// it mapped (removed, or replaced by a cut of the tail): nothing more will
// be appended to this view. It looks at the path (a system call).
func (fw *Follower) Replaced() bool {
	if !fw.replaced {
		st, err := os.Stat(fw.s.path(LogSuffix))
		fw.replaced = err != nil && errors.Is(err, os.ErrNotExist) || err == nil && !fw.s.sameFile(st)
	}
	return fw.replaced
}

// Outgrown reports whether the last Poll found a whole record that ends
// past the view's mapping (a segment written with a larger SegmentBytes
// than the log's settings said at open): the view must be opened again to
// go on.
func (fw *Follower) Outgrown() bool { return fw.outgrown }

// Size returns the file's size as last seen (at open, or by Restat).
func (fw *Follower) Size() int64 { return fw.size }

// Restat reads the file's size again (a system call).
func (fw *Follower) Restat() (int64, error) {
	if err := fw.open(); err != nil || fw.f == nil {
		return fw.size, err
	}
	st, err := fw.f.Stat()
	if err != nil {
		return fw.size, fmt.Errorf("segment: follow: %w", err)
	}
	fw.size = st.Size()
	return fw.size, nil
}

// Poll looks for whole records appended since the view's end, up to
// maxNext (the base of the segment after it, when one exists), reading the
// file with pread, and publishes them. It reports whether the view grew. A
// view whose file was replaced or removed does not grow (see Replaced).
// Bytes that do not verify stop it: they may be a record being written,
// or a torn tail with stale bytes after it; only an end the writer
// vouches for tells damage from those (PollMapped).
func (fw *Follower) Poll(maxNext uint64) (bool, error) {
	s := fw.s
	if !s.activeView || s.endsMissing() {
		return false, nil
	}
	if err := fw.open(); err != nil || fw.f == nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fw.src.forget()
	limit := int64(len(s.ro))
	grew, pos, id := fw.extend(fw.src, limit, maxNext, false)
	if fw.src.err != nil {
		return grew, fmt.Errorf("segment: follow %s: %w", fw.f.Name(), fw.src.err)
	}
	if fw.src.eof >= 0 {
		fw.size = max(fw.size, fw.src.eof)
	}
	if id < maxNext && pos+record.HeaderSize > limit-int64(s.cfg.MaxRecord) {
		// Near the end of the mapping: is a whole record waiting past it?
		if size, err := fw.Restat(); err == nil && size > limit {
			if v, err := s.decodeAt(fw.src, pos); err == nil && v.ID == id && pos+int64(v.Size) > limit {
				fw.outgrown = true
			}
		}
	}
	return grew, nil
}

// PollMapped publishes the whole records from the view's end up to limit,
// reading them through the mapping: no system call. The caller vouches
// that the bytes below limit are whole records the writer wrote into this
// file, which stay inside it (an end the writer published for this file;
// see Follower). So bytes below limit that do not verify are damage: they
// are stepped over, as the walk at open steps over damage (to the first
// record after them that verifies with the expected id or a later one,
// within the reach of one record). It reports whether the view grew.
func (fw *Follower) PollMapped(limit int64, maxNext uint64) bool {
	s := fw.s
	limit = min(limit, int64(len(s.ro)))
	if !s.activeView || s.endsMissing() || limit <= s.end.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	grew, _, _ := fw.extend(mapSource(s.ro[:limit]), limit, maxNext, true)
	return grew
}

// extend walks the records from the view's end, publishes the whole ones
// with their index entries, and returns where it stopped. With damage set,
// bytes that do not verify are damage to step over (the caller knows they
// were written whole). The caller holds s.mu.
func (fw *Follower) extend(src source, limit int64, maxNext uint64, damage bool) (bool, int64, uint64) {
	s := fw.s
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
	fw.offs, fw.tims = fw.offs[:0], fw.tims[:0]
	now := s.cfg.nowMillis()
	entry := func(id uint64, p int64) {
		fw.offs = appendOffset(fw.offs, uint32(id-s.base), uint32(p))
		fw.tims = appendTime(fw.tims, now, uint32(id-s.base))
	}
	pos, id := end, next
	for {
		r := s.walk(src, pos, id, limit, maxNext, &sp, entry)
		pos, id = r.pos, r.next
		if r.stop == nil || id >= maxNext || !damage {
			break
		}
		np, nid := s.nextGood(limitSource{src, limit}, pos, id, s.reach(pos, limit), s.idBound(id, pos, maxNext))
		if np < 0 {
			break
		}
		sp.Count += int(np - pos) // damaged bytes count as written; they get no entry
		pos, id = np, nid
	}
	if pos == end {
		return false, pos, id
	}
	s.addViewEntries(fw.offs, fw.tims)
	s.publishEnd(pos, id)
	return true, pos, id
}

// addViewEntries publishes index entries found past a view's end. The
// entries go in place, after the published ones, into buffers with room
// for the whole segment, so that a follower does not copy its index at
// every look; readers see them once the count moves. The caller holds s.mu.
func (s *Segment) addViewEntries(offs, tims []byte) {
	k := len(offs) / sparseidx.OffsetEntrySize
	if k == 0 {
		return
	}
	x := s.idx.Load()
	n := x.entries()
	if n > 0 {
		ms, _ := x.tim.Entry(n - 1)
		fixTimes(tims, ms)
	}
	fresh := x.offMap != nil || x.timMap != nil ||
		(n+k)*sparseidx.OffsetEntrySize > len(x.off.Buf) || (n+k)*sparseidx.TimeEntrySize > len(x.tim.Buf)
	if fresh {
		c := max(s.cfg.indexCapacity(int64(len(s.ro))), 2*(n+k))
		nx := &index{
			off: sparseidx.Offsets{Buf: make([]byte, c*sparseidx.OffsetEntrySize)},
			tim: sparseidx.Times{Buf: make([]byte, c*sparseidx.TimeEntrySize)},
		}
		copy(nx.off.Buf, x.off.Buf[:n*sparseidx.OffsetEntrySize])
		copy(nx.tim.Buf, x.tim.Buf[:n*sparseidx.TimeEntrySize])
		x = nx
	}
	copy(x.off.Buf[n*sparseidx.OffsetEntrySize:], offs)
	copy(x.tim.Buf[n*sparseidx.TimeEntrySize:], tims)
	x.n.Store(int64(n + k))
	if fresh {
		s.idx.Store(x)
	}
}

// endsMissing reports whether MissingUpTo marked the view's offsets as
// ending in a missing range: the checkpoint files say the log reached
// further than the file holds. Such a view is not followed: the bytes at
// its end are not the records after the range (a reader that took them
// would serve what no writer will, and the writer's next open cuts them
// from under its mapping); a writer that opens the log again goes on in a
// new segment past the range, which a reader finds as the view's
// successor. (A view whose file ended short of its recovery point is
// followed: its writer goes on in the same file, at the recovery point.)
func (s *Segment) endsMissing() bool {
	return s.lostTail.Load()
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
		s.lostTail.Store(s.activeView)
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

// FileID returns the device and inode of the segment's .log file as it was
// when the segment was opened or created (zero when unknown).
func (s *Segment) FileID() [2]uint64 { return s.fileID }

// View reports whether the segment is a read-only view of a segment another
// process may be writing (see OpenView).
func (s *Segment) View() bool { return s.activeView }

// Gone reports whether the segment's .log file is no longer at its path,
// or is another file now (dropped, or replaced by a cut of the tail). It
// looks at the path once (a system call).
func (s *Segment) Gone() bool {
	st, err := os.Stat(s.path(LogSuffix))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	return s.fileID != [2]uint64{} && !s.sameFile(st)
}

// touchPages reads the first word of every page of m[from:from+n], which
// must lie inside the file: the page faults of a read-only mapping are
// taken here rather than by the reader of the next records (on the
// project's machine, a paravirtualized guest, a reader's first touch of a
// page costs about 5 microseconds even after the kernel populated it).
func touchPages(m []byte, from, n int64) {
	page := int64(mmapfile.PageSize)
	for p := from &^ (page - 1); p+4 <= from+n && p+4 <= int64(len(m)); p += page {
		atomic.LoadUint32((*uint32)(unsafe.Pointer(&m[p])))
	}
}
