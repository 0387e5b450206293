package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pagelog/pagelog/mmapfile"
)

// Sealed segments opened by OpenSealed are mapped on first use, not at
// open, and a MapCache bounds how many stay mapped: a log of thousands of
// segments would otherwise hold three mappings per segment (systems limit
// them: vm.max_map_count is often 65,530) and open every file at Open.
//
// A reader's reference pins the mapping: Acquire maps the segment if it is
// not, and eviction only takes a segment whose one reference is the log's
// own. The evictor marks the reference count (evicting) while it unmaps, so
// an Acquire meanwhile waits for it and maps again. The last holder of an
// evicted-then-dropped segment finishes it as before.

// errReplaced says a lazy segment's file is not the one the log opened.
var errReplaced = errors.New("segment: the file was replaced since the log was opened")

// evicting is added to a segment's reference count while it is evicted:
// any count at or below evicting/2 means "being evicted".
const evicting = -(1 << 40)

// MapCache bounds the sealed segments of one log that are mapped at once.
// The zero value does not bound them. It is safe for concurrent use.
type MapCache struct {
	Max int // sealed segments kept mapped (0: no bound)

	mu     sync.Mutex
	segs   []*Segment // mapped lazy segments, in clock order
	hand   int
	mapped atomic.Int64
	maps   atomic.Int64 // mappings made, ever
}

// MapNow maps a lazy segment now (a read-only open maps the newest ones
// at once, so that their records stay readable after the writer drops
// them) and returns why it could not, as the file system said it.
func (s *Segment) MapNow() error {
	if !s.lazy.Load() || !s.Acquire() {
		return nil
	}
	defer s.Release()
	if s.isMapped.Load() {
		return nil
	}
	if p := s.unreadable.Load(); p != nil {
		return *p
	}
	return nil
}

// Lazy reports whether the segment is mapped on demand (and may be evicted):
// a sealed segment opened by OpenSealed.
func (s *Segment) Lazy() bool { return s.lazy.Load() }

// Mapped returns how many sealed segments are mapped now.
func (c *MapCache) Mapped() int {
	if c == nil {
		return 0
	}
	return int(c.mapped.Load())
}

// Maps returns how many times a sealed segment was mapped: with Mapped, how
// much the bound makes segments go and come back.
func (c *MapCache) Maps() int64 {
	if c == nil {
		return 0
	}
	return c.maps.Load()
}

// add records a newly mapped segment and evicts others past Max: a clock
// sweep gives recently used segments a second chance, and skips segments
// a reader holds. An evicted segment that its log let go of meanwhile (a
// drop) is finished after c.mu is let go: finish takes c.mu itself, in
// remove, and a finish under it deadlocked the goroutine on itself, and
// every later drop and mapping behind it.
func (c *MapCache) add(s *Segment) {
	c.mu.Lock()
	c.segs = append(c.segs, s)
	c.mapped.Add(1)
	c.maps.Add(1)
	done := c.evictLocked(s)
	c.mu.Unlock()
	for _, v := range done {
		v.finish()
	}
}

// shrink evicts unheld segments while more than Max are mapped: a reader's
// Release that leaves a segment to its log alone calls it, so that the
// segments readers held past the bound go once they let go, not at the
// next mapping of another segment.
func (c *MapCache) shrink() {
	c.mu.Lock()
	done := c.evictLocked(nil)
	c.mu.Unlock()
	for _, v := range done {
		v.finish()
	}
}

// over reports whether more segments are mapped than Max.
func (c *MapCache) over() bool {
	return c.Max > 0 && c.mapped.Load() > int64(c.Max)
}

// evictLocked runs the clock sweep past Max, never evicting keep; it
// returns the evicted segments its caller must finish after c.mu. The
// caller holds c.mu.
func (c *MapCache) evictLocked(keep *Segment) (done []*Segment) {
	if c.Max <= 0 {
		return nil
	}
	// Two turns of the clock at most (the first may only clear touched
	// marks), counted over the segments as they were: an eviction
	// shortens the list, and a bound taken from it as it shrank stopped
	// the sweep with unheld segments still mapped past Max.
	for tries, most := 0, 2*len(c.segs); len(c.segs) > c.Max && tries < most; tries++ {
		if c.hand >= len(c.segs) {
			c.hand = 0
		}
		v := c.segs[c.hand]
		if v == keep || v.touched.Swap(false) {
			c.hand++
			continue
		}
		evicted, last := v.tryEvict()
		if last {
			done = append(done, v) // finish removes it when it was not evicted
		}
		if evicted {
			c.segs = slices.Delete(c.segs, c.hand, c.hand+1)
			c.mapped.Add(-1)
			continue
		}
		c.hand++
	}
	return done
}

// remove forgets a segment that is finished (its mapping is gone).
func (c *MapCache) remove(s *Segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.segs, s); i >= 0 {
		c.segs = slices.Delete(c.segs, i, i+1)
		c.mapped.Add(-1)
		if c.hand > i {
			c.hand--
		}
	}
}

// ensureMapped maps a lazy segment that is not mapped. The caller holds a
// reference. A file that cannot be mapped (removed or replaced by hand, no
// memory for the mapping) leaves the segment unreadable: its reads report
// the error, nothing faults.
func (s *Segment) ensureMapped() {
	s.mu.Lock()
	if s.isMapped.Load() {
		s.mu.Unlock()
		return
	}
	id := s.fileID
	var err error
	if s.dropping && s.f == nil {
		// The log is removing the file, or renaming it for reuse, and
		// nothing here holds its inode: a file made under the name since
		// may even have been given the same inode number, so the name is
		// not trusted.
		err = errors.New("not mapped again by name")
	} else {
		err = s.mapReadOnly()
	}
	if err == nil && id != [2]uint64{} && s.fileID != id {
		err = fmt.Errorf("%w: %s", errReplaced, s.path(LogSuffix))
	}
	if err == nil && int64(len(s.ro)) < s.end.Load() {
		err = fmt.Errorf("segment: %s shrank from %d to %d bytes since the log was opened", s.path(LogSuffix), s.end.Load(), len(s.ro))
	}
	if err != nil {
		if s.dropping {
			err = fmt.Errorf("%w: %w", errDropped, err)
		}
		s.unmapLocked()
		s.fileID = id
		s.unreadable.Store(&err)
		s.mu.Unlock()
		return
	}
	if s.checked.Load() && (s.memIndex || s.dropping) {
		// The index was rebuilt in memory only (a read-only log, or
		// files that could not be written): the files just mapped are
		// the ones it replaced. Or the log is dropping the segment, and
		// none were mapped (see mapReadOnly). The index is checked
		// again at the next lookup, as at the first mapping.
		s.checked.Store(false)
		s.memIndex = false
		s.indexGen.Add(1)
	} else if s.checked.Load() {
		x := s.idx.Load()
		x.n.Store(s.keptEntries)
	}
	s.unreadable.Store(nil)
	s.isMapped.Store(true)
	s.mu.Unlock()
	if c := s.cfg.Maps; c != nil {
		c.add(s)
	}
}

// errDropped marks a mapping that failed because the log was dropping the
// segment (see MarkDropped): its records are gone, not damaged.
var errDropped = errors.New("segment: dropped by the log")

// tryEvict unmaps a mapped lazy segment that only its log holds. It
// reports whether it did, and whether the log let go of it meanwhile:
// then the caller finishes it (see MapCache.add).
//
// One reference left is the log's only while the log has not given its
// own back (a drop closes the segment while readers may still hold
// records of it): a segment the log let go of is never evicted, or a
// reader's record would be unmapped under it. Close marks the segment
// disowned before it releases, so a look after the swap tells.
func (s *Segment) tryEvict() (evicted, last bool) {
	if s.disowned.Load() || !s.refs.CompareAndSwap(1, 1+evicting) {
		return false, false
	}
	if s.disowned.Load() {
		// The log let go between the two looks: the reference left may
		// be a reader's, or none (then this finishes it).
		return false, s.refs.Add(-evicting) == 0
	}
	s.mu.Lock()
	s.keptEntries = s.idx.Load().n.Load()
	s.unmapLocked()
	s.isMapped.Store(false)
	if s.f != nil {
		// A segment sealed in this process lets its descriptor go too:
		// descriptors are bounded like mappings (a log of many small
		// segments kept one per sealed segment, toward RLIMIT_NOFILE).
		// It is mapped again by name, as one opened sealed is; a
		// Truncate holds the segment mapped while it renames a copy
		// over the name, and a drop marks it dropping before it renames
		// or removes the file. A Sync opens it by name (Hold keeps an
		// eviction from running under it).
		_ = s.f.Close()
		s.f = nil
	}
	s.mu.Unlock()
	return true, s.refs.Add(-evicting) == 0
}

// unmapLocked gives back the mappings of a lazy segment, keeping an empty
// index of the same entry count. The caller holds s.mu and is the only one
// using them.
func (s *Segment) unmapLocked() {
	if s.ro != nil {
		var err error
		if s.cfg.Ranges != nil {
			err = s.cfg.Ranges.Retire(s.ro)
		} else {
			err = mmapfile.Unmap(s.ro)
		}
		if err != nil {
			s.leftMapped.Store(true) // the file is never reused (handOn)
		}
		s.ro = nil
	}
	if x := s.idx.Load(); x != nil {
		_ = mmapfile.Unmap(x.offMap)
		_ = mmapfile.Unmap(x.timMap)
	}
	for _, m := range s.retired {
		_ = mmapfile.Unmap(m)
	}
	s.retired = nil
	s.idx.Store(&index{})
}

// readable maps a lazy segment that is not mapped and reports why it cannot
// be read (nil when it can). Readers of a log whose segments a MapCache
// bounds must hold a reference (Acquire) across their use of the segment's
// bytes: that is what keeps the mapping from eviction.
func (s *Segment) readable() error {
	if !s.lazy.Load() || s.isMapped.Load() {
		return nil
	}
	s.ensureMapped()
	if s.isMapped.Load() {
		return nil
	}
	var why error = errors.New("unknown")
	if p := s.unreadable.Load(); p != nil {
		why = *p
	}
	if s.cfg.ReadOnly && (errors.Is(why, fs.ErrNotExist) || errors.Is(why, errReplaced)) || errors.Is(why, errDropped) {
		// A read-only log: the writer dropped the segment, or cut it
		// (replacing the file), since the open. Or this log dropped it
		// while a reader that had found it in the list took it.
		return fmt.Errorf("%w: segment %s left the log after it was opened (%v)", ErrNotFound, Name(s.base, LogSuffix), why)
	}
	return fmt.Errorf("%w: segment %s cannot be mapped: %w", ErrCorrupt, Name(s.base, LogSuffix), why)
}

// statSealed reads what OpenSealed needs of a sealed segment's .log without
// opening or mapping it.
func (s *Segment) statSealed() error {
	st, err := os.Stat(s.path(LogSuffix))
	if err != nil {
		return fmt.Errorf("segment: open: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("segment: open: %s is not a regular file", s.path(LogSuffix))
	}
	s.fileID = fileIdentity(st)
	s.sealedAt.Store(st.ModTime().UnixMilli())
	s.end.Store(st.Size())
	return nil
}

// waitEvicted waits while an eviction of the segment runs.
func waitEvicted() { runtime.Gosched() }

// pin takes a reference for a method that uses the mappings of a lazy
// segment on its own behalf (its caller may hold none): it maps the segment
// and keeps it from eviction until the returned function runs. ok is false
// once the segment is finished.
func (s *Segment) pin() (unpin func(), ok bool) {
	// A reference even while the segment is not lazy: its seal may end
	// during the method, and an eviction right after it joins the cache
	// would unmap what the method reads.
	if !s.Acquire() {
		return nil, false
	}
	if s.lazy.Load() && !s.isMapped.Load() {
		s.Release() // unreadable: the method has nothing to look at
		return nil, false
	}
	return s.Release, true
}
