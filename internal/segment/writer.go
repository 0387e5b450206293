package segment

import (
	"errors"
	"fmt"
	"io"
	"os"
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
