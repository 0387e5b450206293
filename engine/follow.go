package engine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// Following a writer. A log opened read-only follows the process that
// appends to it: Next, Read, Records and Wait look for records appended
// since (refresh), under one lock, with no lock file taken and no file of
// the log written.
//
//   - The fast way reads log.notify (see notify.go): the writer's end in
//     its active segment, paired with the identity of that file. When the
//     file is the newest view's, the records up to that end are whole and
//     inside the file, and are read through the mapping: no system call.
//   - The slow way looks at the files: the newest view's tail with pread
//     (segment.Follower.Poll), then the segment named after the offset that
//     follows its last record (the writer's next segment), then, now and
//     then, the directory (a segment started past lost offsets by SkipTo;
//     and, once the log has waited for a record, segments dropped from the
//     front, released so that their disk space goes: a reader that only
//     reads keeps the records it opened with readable, one that follows
//     a stream for days must not hold every dropped segment). A newest
//     file replaced under the view (a cut by Truncate, or
//     a writer that recovered the log) makes the follower open the log
//     again and go on from what it holds now.
//
// The fast way is tried first; the slow way runs when it cannot tell, and
// at least every slowEvery while nothing moves.
type follower struct {
	mu      sync.Mutex
	fw      *segment.Follower         // the newest view's (under mu)
	nm      atomic.Pointer[notifyMap] // log.notify, once found
	gen     uint32                    // the generation known to name fw's file (under mu)
	genOK   bool
	seen    atomic.Uint64 // the tail word a spinning reader saw last
	waited  atomic.Bool   // Wait was called: the log is a stream's reader
	closing chan struct{} // closed by Close: pollers stop waiting

	lastSlow, lastLook, lastList, lastPrune time.Time // (under mu)
}

const (
	slowEvery  = 100 * time.Millisecond // the files are looked at this often while nothing moves
	lookEvery  = 100 * time.Millisecond // log.notify is looked for this often while it is missing
	listEvery  = time.Second            // the directory is listed this often
	pruneEvery = time.Second            // dropped segments are looked for this often
)

// startFollowing sets up a read-only log to follow a writer. Nothing is
// opened before the first look.
func (l *Log) startFollowing() {
	l.fol = &follower{closing: make(chan struct{})}
}

// closeFollowing ends following: sleepers of this log wake (they see it
// closed), the files are let go.
func (l *Log) closeFollowing() {
	f := l.fol
	close(f.closing)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fw != nil {
		_ = f.fw.Close()
		f.fw = nil
	}
	if m := f.nm.Swap(nil); m != nil {
		futexWake(m.u32(notifyFutex))
		m.release()
	}
}

// refresh looks for records appended since the last look and publishes
// them (a log opened for writing has nothing to look for).
func (l *Log) refresh() {
	f := l.fol
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.closed.Load() {
		return
	}
	if moved, sure := l.refreshFast(); moved || sure && time.Since(f.lastSlow) < slowEvery {
		return
	}
	// An error reading the files (other than their going away, which the
	// look handles) leaves the log as it was; the next look tries again.
	_ = l.refreshSlow()
}

// refreshFast publishes the records up to the end log.notify gives for the
// newest view's file, through the mapping. sure says that log.notify
// spoke for that file and the view reached its end.
func (l *Log) refreshFast() (moved, sure bool) {
	f := l.fol
	m := f.nm.Load()
	segs := *l.segs.Load()
	if m == nil || f.fw == nil || len(segs) == 0 {
		return false, false
	}
	newest := segs[len(segs)-1]
	if f.fw.Segment() != newest {
		return false, false
	}
	gen, end := m.tail()
	if !f.genOK || gen != f.gen {
		id, ok := m.identity()
		if !ok || id.gen != gen || id.base != newest.Base() || id.file != newest.FileID() {
			return false, false
		}
		f.gen, f.genOK = gen, true
	}
	have := newest.End()
	if int64(end) <= have {
		return false, int64(end) == have
	}
	limit := int64(end)
	if limit > f.fw.Size() {
		// Bounded by the file's size too, once per allocation step: a
		// damaged log.notify never makes the mapping be read past it.
		size, err := f.fw.Restat()
		if err != nil {
			return false, false
		}
		limit = min(limit, size)
	}
	if f.fw.PollMapped(limit, maxOffset) {
		moved = true
		l.next.Store(newest.Next())
	}
	return moved, newest.End() == int64(end)
}

// refreshSlow looks at the files: the newest view's tail, its successor,
// and now and then the directory.
func (l *Log) refreshSlow() error {
	f := l.fol
	now := time.Now()
	f.lastSlow = now
	if f.nm.Load() == nil && now.Sub(f.lastLook) >= lookEvery {
		f.lastLook = now
		if m := openNotifyView(l.dir); m != nil {
			f.nm.Store(m)
		}
	}
	if len(*l.segs.Load()) == 0 {
		// Opened before the writer made its first segment.
		if bases, err := listSegments(l.dir); err != nil || len(bases) == 0 {
			return err
		}
		return l.resync()
	}
	defer func() {
		segs := *l.segs.Load()
		if len(segs) > 0 && segs[len(segs)-1].Next() > l.next.Load() {
			l.next.Store(segs[len(segs)-1].Next())
		}
	}()
	for range maxFollow {
		segs := *l.segs.Load()
		newest := segs[len(segs)-1]
		if f.fw == nil || f.fw.Segment() != newest {
			if f.fw != nil {
				_ = f.fw.Close()
			}
			f.fw, f.genOK = newest.Follow(), false
		}
		if _, err := f.fw.Poll(maxOffset); err != nil {
			return err
		}
		if f.fw.Replaced() {
			return l.newestGone(newest)
		}
		if f.fw.Outgrown() {
			if err := l.reopenNewest(newest); err != nil {
				return err
			}
			continue
		}
		s, err := l.successor(newest, now)
		if err != nil {
			return err
		}
		if s != nil {
			l.publish(append(segs, s))
			continue
		}
		break
	}
	if f.waited.Load() && now.Sub(f.lastPrune) >= pruneEvery {
		f.lastPrune = now
		l.pruneDropped()
	}
	return nil
}

// successor opens the segment after the newest view, if the writer has
// started one: named after the offset that follows the view's last record
// (a roll), or, found by listing the directory, further on (a segment
// started past lost offsets: the offsets between are missing).
func (l *Log) successor(newest *segment.Segment, now time.Time) (*segment.Segment, error) {
	if newest.Next() > newest.Base() {
		s, _, err := segment.OpenView(l.cfg, newest.Next(), maxOffset, segment.Hint{})
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return s, err
		}
	}
	f := l.fol
	named := false
	if m := f.nm.Load(); m != nil {
		id, ok := m.identity()
		named = ok && id.base > newest.Base()
	}
	if !named && now.Sub(f.lastList) < listEvery {
		return nil, nil
	}
	f.lastList = now
	base, ok, err := l.nextBase(newest.Base())
	if err != nil || !ok {
		return nil, err
	}
	// The writer has left the newest view's segment: what it appended
	// there since the last look is read first.
	if _, err := f.fw.Poll(base); err != nil || f.fw.Replaced() {
		return nil, err // gone meanwhile: the next look sees it
	}
	if newest.Next() > newest.Base() && newest.Next() < base {
		// A segment named after its last record, made after the listing
		// looked (a listing can miss a file created while it runs).
		if _, err := os.Stat(filepath.Join(l.dir, segment.Name(newest.Next(), segment.LogSuffix))); err == nil {
			return nil, nil // the next look opens it by name
		}
	}
	if base < newest.Next() {
		return nil, nil // not a successor: a changed log (resync finds out)
	}
	s, _, err := segment.OpenView(l.cfg, base, maxOffset, segment.Hint{})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// Offsets from the newest view's end to the new base are missing: the
	// writer skipped them (SkipTo, or lost offsets at a restart).
	newest.MissingUpTo(base)
	return s, nil
}

// nextBase returns the lowest base above after among the segment files, as
// a second listing sees them: a file created while the first one ran may
// be missing from it, not from one that starts after it.
func (l *Log) nextBase(after uint64) (uint64, bool, error) {
	var bases []uint64
	for range 2 {
		var err error
		if bases, err = listSegments(l.dir); err != nil {
			return 0, false, err
		}
		if i, _ := slices.BinarySearch(bases, after+1); i == len(bases) {
			return 0, false, nil
		}
	}
	i, _ := slices.BinarySearch(bases, after+1)
	return bases[i], true, nil
}

// newestGone handles a newest view whose file is no longer at its path.
// Replaced by another file of the same name: a cut of the tail (or a
// writer that recovered the log), and the follower opens the log again.
// Removed: the writer ran so far ahead that it dropped the segment (the
// follower fell behind retention): a log that waits (a stream's reader)
// opens the log again and goes on at what is left, its readers getting
// ErrTrimmed for what was dropped; one that only reads keeps what it has
// and stops following, so that every offset it served stays readable.
// Drops go oldest first, so a removed newest file whose predecessor, or
// the oldest view's file, is still there was no drop: a Truncate at or
// below its base removed it (and maybe more of the newest), and the
// follower opens the log again, as after any cut.
func (l *Log) newestGone(newest *segment.Segment) error {
	if _, err := os.Stat(newest.Path()); errors.Is(err, fs.ErrNotExist) && !l.fol.waited.Load() && l.droppedBelow(newest) {
		return nil
	}
	return l.resync()
}

// droppedBelow reports whether the files of the view before newest and of
// the oldest view are gone too, as a drop up to newest leaves them (false
// when newest is the only view).
func (l *Log) droppedBelow(newest *segment.Segment) bool {
	segs := *l.segs.Load()
	i := slices.Index(segs, newest)
	if i < 1 {
		return false
	}
	for _, s := range []*segment.Segment{segs[i-1], segs[0]} {
		if _, err := os.Stat(s.Path()); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

// reopenNewest opens the newest view again, mapped at its file's size now:
// records were appended past the end of its mapping.
func (l *Log) reopenNewest(old *segment.Segment) error {
	s, _, err := segment.OpenView(l.cfg, old.Base(), maxOffset, segment.Hint{})
	if err != nil {
		return err
	}
	if s.Next() < old.Next() || s.FileID() != old.FileID() {
		_ = s.Close()
		return l.resync()
	}
	segs := slices.Clone(*l.segs.Load())
	segs[len(segs)-1] = s
	l.republish(segs, old)
	_ = l.fol.fw.Close()
	l.fol.fw = nil
	return old.Close()
}

// pruneDropped lets go of the oldest segments whose files the writer
// removed (DropBefore, retention): readers holding their records keep
// them until they release them; the disk space goes with the last.
func (l *Log) pruneDropped() {
	segs := *l.segs.Load()
	k := 0
	for k < len(segs)-1 {
		if _, err := os.Stat(segs[k].Path()); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		k++
	}
	if k == 0 {
		return
	}
	l.republish(slices.Clone(segs[k:]), segs[:k]...)
	for _, s := range segs[:k] {
		_ = s.Close()
	}
}

// republish publishes segs for a read-only log, in place of gone, whose
// read counts the log keeps (see departed; under l.mu, as Stats reads
// them).
func (l *Log) republish(segs []*segment.Segment, gone ...*segment.Segment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.departed(gone...)
	l.publish(segs)
}

// resync opens the log again and goes on with what it holds now: the
// newest file was replaced under the view (a cut of the tail by Truncate,
// or a writer that recovered the log). Records the cut removed are no
// longer served; iterators stop before them, as beside a writer that cuts.
func (l *Log) resync() error {
	nl, err := open(l.dir, l.opts, nil)
	if err != nil {
		return err
	}
	nl.closeFollowing()
	old := *l.segs.Load()
	segs := *nl.segs.Load()
	next := nl.next.Load()
	if next < l.next.Load() {
		l.cuts.Store(l.cuts.Load().with(next))
	}
	l.republish(segs, old...)
	l.next.Store(next)
	for _, s := range old {
		_ = s.Close()
	}
	if f := l.fol; f.fw != nil {
		_ = f.fw.Close()
		f.fw = nil
	}
	return nil
}
