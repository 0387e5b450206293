package segment

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/pagelog/pagelog/mmapfile"
)

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

func growTo(cfg *Config, f *os.File, have, want int64) error {
	if have >= want {
		return nil
	}
	if err := cfg.allocate(f, have, want-have); err != nil {
		return fmt.Errorf("segment: preallocate %s: %w", f.Name(), err)
	}
	return nil
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
