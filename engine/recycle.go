package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/pagelog/pagelog/internal/segment"
)

// Options.RecycleSegments: the .log files of segments that DropBefore (or
// retention) drops are kept, up to that many, and the next prepared
// segment is made from one of them instead of a new file (see
// internal/segment/recycle.go for why: a reused file's pages are in the
// page cache, a new file's memory is fresh, and fresh memory is what made
// appends stall on the project's machine). A dropped file is renamed to
// recycledPrefix+its segment name, out of the segments' names, so that
// nothing lists it as a segment; it is handed on only when the last
// reference to its segment in this process is gone. A writable open
// removes files of that name that a crash left behind, and Close removes
// those not reused.

// recycledPrefix names a dropped segment file kept for reuse.
const recycledPrefix = "recycled-"

// recycler holds the dropped files waiting for reuse. put runs on whichever
// goroutine releases a dropped segment last. The spare files, those kept
// and the prepared segment, are at most max: a log that keeps one
// (the queue) takes no more disk than without reuse, its active segment
// and the next one prepared.
type recycler struct {
	max int
	// admit calls keep with r.mu held, and with the number of prepared
	// segments (0 or 1) fixed while it runs: a file is kept or not, and
	// the preparer starts a segment or not, in one order.
	admit func(keep func(spare int) bool) bool

	mu     sync.Mutex
	paths  []string // newest last
	closed bool
	reused uint64 // files made into segments (LogStats.Recycled)
}

func (r *recycler) put(path string) {
	keep := r.admit(func(spare int) bool {
		if r.closed || len(r.paths)+spare >= r.max {
			return false
		}
		r.paths = append(r.paths, path)
		return true
	})
	if !keep {
		_ = os.Remove(path)
	}
}

// take returns the file dropped last (the likeliest to be cached); false
// for a log that keeps none (r nil).
func (r *recycler) take() (string, bool) {
	if r == nil {
		return "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.paths)
	if n == 0 {
		return "", false
	}
	p := r.paths[n-1]
	r.paths = r.paths[:n-1]
	return p, true
}

// waiting reports whether a kept file waits for reuse; false for a log
// that keeps none (r nil).
func (r *recycler) waiting() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.paths) > 0
}

// close removes the files not reused; files handed on later are removed
// at once.
func (r *recycler) close() {
	r.mu.Lock()
	paths := r.paths
	r.paths, r.closed = nil, true
	r.mu.Unlock()
	for _, p := range paths {
		_ = os.Remove(p)
	}
}

// recycleDropped renames the .log file of s, a segment being dropped, out
// of the segments' names and marks it for reuse; its index files are
// removed first (an index file is never there without its .log). It
// reports false when the file was not renamed: the caller removes it.
func (l *Log) recycleDropped(s *segment.Segment) bool {
	if l.recycle == nil || s.Active() {
		return false
	}
	for _, suffix := range []string{segment.TimeIndexSuffix, segment.IndexSuffix} {
		_ = os.Remove(filepath.Join(l.dir, segment.Name(s.Base(), suffix)))
	}
	to := filepath.Join(l.dir, recycledPrefix+segment.Name(s.Base(), segment.LogSuffix))
	if os.Rename(s.Path(), to) != nil {
		return false
	}
	s.RecycleTo(to, l.recycle.put)
	return true
}

// prepare makes the next segment for the preparer: from the kept file
// reuse when there is one, else new. A reused file that fails is removed,
// and the segment is made new (the preparer marks it fresh).
func (l *Log) prepare(reuse string) (*segment.Segment, error) {
	if reuse != "" {
		s, err := segment.PrepareRecycled(l.cfg, reuse)
		if err == nil {
			l.recycle.mu.Lock()
			l.recycle.reused++
			l.recycle.mu.Unlock()
			return s, nil
		}
		l.rolls.mu.Lock()
		l.rolls.fresh = true
		l.rolls.mu.Unlock()
	}
	return segment.Prepare(l.cfg)
}

// isRecycledName reports whether name is a dropped segment file kept for
// reuse.
func isRecycledName(name string) bool {
	return strings.HasPrefix(name, recycledPrefix) && strings.HasSuffix(name, segment.LogSuffix)
}

// removeRecycledLeftovers removes the files kept for reuse that a crash
// left behind (names, from the open's listing; at a writable open).
func (l *Log) removeRecycledLeftovers(names []string) {
	for _, name := range names {
		if os.Remove(filepath.Join(l.dir, name)) == nil {
			l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf("removed %s: a dropped segment kept for reuse", name))
		}
	}
}

// ReleaseSpares removes the files the log holds ahead of need and returns
// how many it removed: the dropped segment files kept for reuse
// (Options.RecycleSegments) and the next segment prepared ahead of a
// roll, unless the preparer is making it at that moment. It is for a
// writer short of disk, whose write failed on a full disk and frees space
// once made (a work queue's head checkpoint, which lets the segments
// behind the head go). The next roll makes its segment itself if the
// preparer has not made one again by then.
func (l *Log) ReleaseSpares() int {
	if l.readOnly || l.closed.Load() {
		return 0
	}
	n := 0
	for {
		p, ok := l.recycle.take()
		if !ok {
			break
		}
		if os.Remove(p) == nil {
			n++
		}
	}
	if l.releasePrepared() {
		n++
	}
	return n
}

// releasePrepared removes the segment prepared for the next roll, unless
// the preparer is making it at that moment or a roll is taking it. It
// reports whether it removed one.
func (l *Log) releasePrepared() bool {
	l.rolls.mu.Lock()
	s := l.rolls.prepared
	if l.rolls.preparing || l.rolls.activating {
		s = nil // being made (faulted in) or taken by a roll
	}
	if s != nil {
		// preparing keeps the preparer from making the prepared
		// files again under the names being removed.
		l.rolls.prepared, l.rolls.preparing = nil, true
	}
	l.rolls.mu.Unlock()
	if s == nil {
		return false
	}
	_ = s.Close()
	s.RemoveFiles()
	l.rolls.mu.Lock()
	l.rolls.preparing = false
	l.rolls.mu.Unlock()
	return true
}

// freedForRetry reports whether an append that failed with err may be
// tried once more: the disk was full, and the log held spare files, now
// removed (ReleaseSpares), whose space the append can take. A log that
// keeps dropped files for reuse never fails an append for want of the
// space they hold. Called with l.mu held.
func (l *Log) freedForRetry(err error) bool {
	return errors.Is(err, syscall.ENOSPC) && l.ReleaseSpares() > 0
}
