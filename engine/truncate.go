package engine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/mmapfile"
)

// Truncate removes every record at or after offset, so that the next Append
// gets offset (a replicated log drops a conflicting tail this way). offset
// must lie in [First, Next]; Next is a no-op. It is durable when it returns.
//
// Crash safety: newer segments are removed newest first, then the segment
// holding offset is replaced by a copy of its bytes below the cut (written,
// synced, renamed over it). A crash part way leaves the log as it was minus
// some of its newest records, never with a gap. The file is replaced, never
// shrunk in place: a reader still holding a record of the cut tail, in this
// process or another, keeps reading the bytes it was given.
//
// Beside it, reads of the records below offset succeed all along, and the
// records from offset on read as not found (ErrNotFound) from its start.
func (l *Log) Truncate(offset uint64) error {
	l.mu.Lock()
	l.awaitSeal()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	next := l.next.Load()
	segs := *l.segs.Load()
	if offset == next {
		return nil
	}
	if offset > next || offset < segs[0].Base() {
		return fmt.Errorf("%w: truncate at %d outside the log [%d, %d]", ErrNotFound, offset, segs[0].Base(), next)
	}
	// Iterators stop before yielding a record at or past the cut.
	l.cuts.Store(l.cuts.Load().with(offset))
	k, _ := slices.BinarySearchFunc(segs, offset, func(s *segment.Segment, o uint64) int {
		switch {
		case s.Base() > o:
			return 1
		case s.Base() < o:
			return -1
		}
		return 0
	})
	if k == len(segs) || segs[k].Base() > offset {
		k--
	}
	pos, err := l.cutPosition(segs[k], offset)
	if err != nil {
		return err
	}
	// The records from offset on are gone for readers from here on (they
	// get ErrNotFound, and OffsetForTime answers at most offset), while
	// the segment that holds the cut stays readable below it until its
	// copy replaces it (reopenAt).
	l.next.Store(offset)
	// Durable and the recovery point drop to the cut before the checkpoint
	// files go: the checkpointer writes none past it from here on.
	l.sync.cut(offset)
	for _, name := range []string{cleanName, recoveryName} {
		_ = os.Remove(filepath.Join(l.dir, name))
	}
	// Newest first: each removal leaves a contiguous prefix behind.
	for i := len(segs) - 1; i > k; i-- {
		l.dropNewest(segs[:i+1])
	}
	return l.reopenAt(segs[:k+1], pos)
}

// cutPosition is where the record at offset begins: the end of the record
// before it, which must verify (so that a damaged record can be cut too).
func (l *Log) cutPosition(s *segment.Segment, offset uint64) (int64, error) {
	if offset == s.Base() {
		return 0, nil
	}
	if !s.Acquire() { // a sealed segment may be mapped on demand, and evicted
		return 0, fmt.Errorf("pagelog: truncate at %d: %w", offset, ErrClosed)
	}
	defer s.Release()
	v, pos, err := s.Read(offset - 1)
	if err != nil {
		return 0, fmt.Errorf("pagelog: truncate at %d: the record before it does not verify: %w", offset, err)
	}
	return pos + int64(v.Size), nil
}

// dropNewest unpublishes and removes the newest segment of segs.
func (l *Log) dropNewest(segs []*segment.Segment) {
	s := segs[len(segs)-1]
	l.departed(s)
	l.publish(slices.Clone(segs[:len(segs)-1]))
	l.sync.pending = slices.DeleteFunc(l.sync.pending, func(p *segment.Segment) bool { return p == s })
	if s == l.active {
		l.active = nil
	}
	s.MarkDropped()
	removeSegmentFiles(l.dir, s.Base())
	_ = s.Close()
}

// reopenAt makes the last segment of segs the active one, holding only its
// bytes below pos (all of it removed when pos is 0 and it is not the only
// segment).
func (l *Log) reopenAt(segs []*segment.Segment, pos int64) error {
	s := segs[len(segs)-1]
	if pos == 0 && len(segs) > 1 {
		l.dropNewest(segs)
		segs = segs[:len(segs)-1]
		s = segs[len(segs)-1]
		pos = s.End()
	}
	base := s.Base()
	// s stays in the list, readable, until its copy replaces it: readers
	// of the records below the cut find them all along (appends wait for
	// l.mu). The reference taken here keeps it mapped (a segment the map
	// cache had unmapped would be mapped again by name, the copy once
	// renamed over it) until it leaves the list. It is marked dropped
	// next, before the copy: a reader's index rebuild must not write
	// files the new segment owns, and a dropped segment is never mapped
	// again by name.
	held := s.Acquire()
	s.MarkDropped()
	replace := func(ns *segment.Segment) {
		l.departed(s)
		segs := slices.Clone(segs[:len(segs)-1])
		if ns != nil {
			segs = append(segs, ns)
		}
		l.publish(segs)
		l.sync.pending = slices.DeleteFunc(l.sync.pending, func(p *segment.Segment) bool { return p == s })
		l.active = ns
		_ = s.Close()
		if held {
			s.Release()
		}
	}
	fail := func(err error) error {
		// The log ends where the list does now, before s: an iterator
		// or ReadNext never looks for records the list cannot hold.
		replace(nil)
		l.next.Store(base)
		l.sync.cut(base) // a second cut, for the waiters of offsets past base
		l.sync.fail(err)
		return err
	}
	if err := copyPrefix(filepath.Join(l.dir, segment.Name(base, segment.LogSuffix)), pos, l.opts.FileMode, l.opts.datasync); err != nil {
		return fail(err)
	}
	// The index files go once the copy is in place (they describe s, and
	// the new segment makes its own), not before: Verify beside the copy
	// would find s without them. Entries of s that a crash leaves beside
	// the copy point at the same bytes below the cut, and past its end
	// they are not trusted.
	for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		_ = os.Remove(filepath.Join(l.dir, segment.Name(base, suffix)))
	}
	ns, _, err := segment.OpenActive(l.cfg, base, segment.Hint{})
	if err != nil {
		return fail(err)
	}
	if err := ns.Sync(); err != nil {
		_ = ns.Close()
		return fail(err)
	}
	replace(ns)
	l.next.Store(ns.Next())
	l.pre.rolled(ns)
	if err := syncDir(l.dir); err != nil {
		return err
	}
	// The copy is synced, the directory too: the new segment's end is a
	// recovery point, if every offset below it was durable before.
	l.sync.cutDone(recoveryPoint{Base: ns.Base(), Pos: ns.End(), Next: ns.Next()})
	return nil
}

// copyPrefix replaces the file at path with a copy of its first pos bytes:
// a temporary file, synced (through datasync when a test sets it),
// renamed over it. The old file's inode, and so every mapping of it, keeps
// its bytes.
func copyPrefix(path string, pos int64, mode os.FileMode, datasync func(*os.File) error) error {
	if datasync == nil {
		datasync = mmapfile.Datasync
	}
	src, err := regfile.Open(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("pagelog: truncate: %w", err)
	}
	defer src.Close()
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pagelog: truncate: %w", err)
	}
	dst, err := regfile.Create(tmp, os.O_RDWR, mode)
	if err != nil {
		return fmt.Errorf("pagelog: truncate: %w", err)
	}
	_, err = io.CopyN(dst, src, pos) // copy_file_range where the system has it
	if err == nil {
		err = datasync(dst)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pagelog: truncate %s at %d: %w", filepath.Base(path), pos, err)
	}
	return nil
}
