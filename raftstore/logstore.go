package raftstore

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
)

// maxKeptBuffer bounds the encoding buffer kept between StoreLogs calls.
const maxKeptBuffer = 4 << 20

// span returns the log and the entries it holds, [first, next); first >=
// next when the store is empty. l is nil after Close and while the log is
// being replaced.
func (s *Store) span() (l *engine.Log, first, next uint64) {
	l = s.log.Load()
	if l == nil {
		return nil, 0, 0
	}
	next = min(l.Next(), s.cut.Load())
	first = max(l.First(), s.first.Load())
	return l, first, next
}

// absent is the error of a call that found no log: ErrClosed after Close,
// else the store is being reset and holds nothing.
func (s *Store) absent() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// FirstIndex returns the index of the first entry, 0 when there is none.
func (s *Store) FirstIndex() (uint64, error) {
	_, first, next := s.span()
	if err := s.absent(); err != nil {
		return 0, err
	}
	if first >= next {
		return 0, nil
	}
	return first, nil
}

// LastIndex returns the index of the last entry, 0 when there is none.
func (s *Store) LastIndex() (uint64, error) {
	_, first, next := s.span()
	if err := s.absent(); err != nil {
		return 0, err
	}
	if first >= next {
		return 0, nil
	}
	return next - 1, nil
}

// GetLog reads the entry at index into out: raft.ErrLogNotFound when the
// store does not hold it, an error wrapping ErrCorrupt when it is damaged.
// Data and Extensions are copies (one allocation for both), which out
// keeps; the entry's bytes are read straight from the log's mapping.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	l := s.log.Load()
	if l == nil {
		if err := s.absent(); err != nil {
			return err
		}
		return raft.ErrLogNotFound
	}
	if index < s.first.Load() || index >= s.cut.Load() {
		return raft.ErrLogNotFound
	}
	rec, err := l.Read(index)
	if err != nil {
		switch {
		case errors.Is(err, engine.ErrNotFound):
			return raft.ErrLogNotFound
		case errors.Is(err, engine.ErrClosed):
			// Closed, or replaced by reset: the store held nothing then.
			if err := s.absent(); err != nil {
				return err
			}
			return raft.ErrLogNotFound
		}
		return fmt.Errorf("raftstore: GetLog(%d): %w", index, err)
	}
	err = decodeEntry(index, rec.Body, out)
	rec.Release()
	return err
}

// StoreLog stores one entry; see StoreLogs.
func (s *Store) StoreLog(e *raft.Log) error {
	return s.StoreLogs([]*raft.Log{e})
}

// StoreLogs appends the entries with one append and one fsync of the log
// for the whole batch, and returns once they are durable (unless
// Options.NoSync). All or nothing: an error leaves none of them stored.
//
// The indexes must be consecutive and, when the store holds entries,
// follow the last one: anything else (a gap, an overwrite) is refused with
// ErrNotContiguous and writes nothing, since raft deletes a conflicting
// suffix before it writes over it. An empty store takes a batch at any
// index (a follower's first entries after a snapshot).
func (s *Store) StoreLogs(entries []*raft.Log) error {
	if len(entries) == 0 {
		return nil
	}
	start := entries[0].Index
	if start > math.MaxUint64-uint64(len(entries)) {
		return fmt.Errorf("%w: a batch of %d entries from index %d: the last index a log can hold is %d",
			engine.ErrFull, len(entries), start, uint64(math.MaxUint64-1))
	}
	for i, e := range entries {
		if e.Index != start+uint64(i) {
			return fmt.Errorf("%w: entry %d of the batch has index %d, want %d", ErrNotContiguous, i, e.Index, start+uint64(i))
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	l, first, next, err := s.writable()
	if err != nil {
		return err
	}
	if first < next && start != next {
		return fmt.Errorf("%w: StoreLogs from index %d, but the last stored entry is %d", ErrNotContiguous, start, next-1)
	}
	if first >= next {
		var err error
		if l, err = s.startAt(l, start); err != nil {
			return err
		}
	}
	bodies := s.encode(entries)
	at, n, err := l.AppendBatch(bodies, nil)
	clear(bodies)
	if err != nil {
		if n > 0 {
			if terr := l.Truncate(at); terr != nil {
				err = errors.Join(err, fmt.Errorf("raftstore: removing the %d entries of the failed batch: %w", n, terr))
			}
		}
		return fmt.Errorf("raftstore: StoreLogs of %d entries from %d: %w", len(entries), start, err)
	}
	return nil
}

// encode builds the batch's record bodies in the store's buffer.
func (s *Store) encode(entries []*raft.Log) [][]byte {
	total := 0
	for _, e := range entries {
		total += entrySize(e)
	}
	if cap(s.buf) < total {
		s.buf = make([]byte, total)
	}
	buf := s.buf[:total]
	bodies := s.bodies[:0]
	for _, e := range entries {
		n := encodeEntry(buf, e)
		bodies = append(bodies, buf[:n:n])
		buf = buf[n:]
	}
	if total > maxKeptBuffer {
		s.buf = nil
	}
	s.bodies = bodies
	return bodies
}

// startAt readies an empty store for a first entry at index: the log goes
// on at its end when index is its next offset, else it is replaced by a
// new log that starts at index.
func (s *Store) startAt(l *engine.Log, index uint64) (*engine.Log, error) {
	if index == l.Next() {
		if s.bounds.first > index {
			// Entries deleted past the end of the log (a DeleteRange
			// beyond LastIndex): nothing at or above index is held, so
			// the first entry may come down to it.
			if err := s.setBounds(bounds{first: index, cut: noCut}); err != nil {
				return nil, err
			}
		}
		return l, nil
	}
	return s.reset(l, index)
}

// reset replaces the log of an empty store by a new one whose first offset
// is index, for a first entry that is not at the log's next offset. Every
// step leaves an empty store behind a crash:
//
//  1. the log directory is renamed to log.reset (durable): whatever it
//     held is gone for Open, which removes it;
//  2. raft.bounds gets first = index (durable);
//  3. a new log is created at index (its creation is durable);
//  4. log.reset is removed.
func (s *Store) reset(l *engine.Log, index uint64) (*engine.Log, error) {
	s.log.Store(nil)
	closeErr := l.Close()
	if err := s.removeReset(); err != nil {
		return nil, err
	}
	if err := os.Rename(filepath.Join(s.dir, logDir), filepath.Join(s.dir, resetDir)); err != nil {
		return nil, errors.Join(fmt.Errorf("raftstore: replacing the log: %w", err), closeErr)
	}
	if !s.opts.NoSync {
		if err := syncDir(s.dir); err != nil {
			return nil, err
		}
	}
	if err := s.setBounds(bounds{first: index, cut: noCut}); err != nil {
		return nil, err
	}
	nl, err := s.openLog(index)
	if err != nil {
		return nil, err
	}
	s.log.Store(nl)
	// A failure here leaves a directory that the next Open removes.
	_ = s.removeReset()
	return nl, nil
}

// writable returns the log and its span for a call that changes it (under
// wmu), first finishing what an earlier call left undone: a reset that
// failed part way (the log is opened again) or a cut whose Truncate failed
// (it is tried again).
func (s *Store) writable() (l *engine.Log, first, next uint64, err error) {
	if s.closed.Load() {
		return nil, 0, 0, ErrClosed
	}
	if l = s.log.Load(); l == nil {
		if l, err = s.openLog(max(s.bounds.first, s.opts.Log.FirstOffset)); err != nil {
			return nil, 0, 0, err
		}
		s.log.Store(l)
	}
	if s.bounds.cut != noCut {
		if err := s.finish(l); err != nil {
			return nil, 0, 0, err
		}
	}
	l, first, next = s.span()
	return l, first, next, nil
}

// DeleteRange deletes the entries [min, max] (raft.LogStore). It is
// durable when it returns (unless Options.NoSync). raft asks for two kinds
// of range, and they are done differently:
//
//   - a prefix (min at or below the first entry): compaction after a
//     snapshot. The new first index is recorded in raft.bounds (durable),
//     then the log drops its whole segments below it; entries left below it
//     in the first kept segment are invisible from then on.
//   - a suffix (max at or beyond the last entry): a follower's conflicting
//     entries. The cut is recorded in raft.bounds first (durable), then the
//     log's Truncate removes the entries, then the record is cleared. A
//     crash anywhere in between leaves either every entry or the cut
//     applied (Open completes it), never entries raft was told are gone,
//     and never loses an entry below min.
//
// A range that deletes everything is a prefix. A range that misses every
// entry does nothing. A range strictly inside the log is refused with
// ErrMiddleRange.
func (s *Store) DeleteRange(min, max uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	l, first, next, err := s.writable()
	if err != nil {
		return err
	}
	if min > max || first >= next || max < first || min >= next {
		return nil
	}
	last := next - 1
	switch {
	case min <= first:
		newFirst := next
		if max < last {
			newFirst = max + 1
		}
		if err := s.setBounds(bounds{first: newFirst, cut: noCut}); err != nil {
			return err
		}
		if _, err := l.DropBefore(newFirst); err != nil {
			return fmt.Errorf("raftstore: DeleteRange(%d, %d): entries are deleted, but dropping their segments failed: %w", min, max, err)
		}
		return nil
	case max >= last:
		if err := s.setBounds(bounds{first: s.bounds.first, cut: min}); err != nil {
			return err
		}
		if err := l.Truncate(min); err != nil {
			return fmt.Errorf("raftstore: DeleteRange(%d, %d): %w (the next Open completes it)", min, max, err)
		}
		return s.setBounds(bounds{first: s.bounds.first, cut: noCut})
	}
	return fmt.Errorf("%w: DeleteRange(%d, %d) of the entries [%d, %d] would leave a hole", ErrMiddleRange, min, max, first, last)
}

// IsMonotonic reports true (raft.MonotonicLogStore): the store holds
// consecutive indexes only, so raft removes every entry after restoring a
// snapshot instead of leaving a gap.
func (s *Store) IsMonotonic() bool { return true }
