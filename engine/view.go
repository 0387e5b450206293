package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/pagelog/pagelog/internal/segment"
)

// A read-only open sees a consistent prefix of a log that a writer in
// another process may be changing: appending, rolling (creating the next
// segment, then sealing the old one: trimming its three files), dropping
// old segments, cutting the tail. How it stays safe:
//
//   - The directory is listed twice. A listing may miss a file created
//     while it runs (directories are read in hash order), but not one that
//     existed when it started: so every segment up to the newest one both
//     listings saw is known, with no gap, and newer ones are found by name
//     (a segment is named after the offset that follows its predecessor's
//     last record).
//   - The newest two segments are opened as views (segment.OpenView): their
//     ends are found with pread and their index files copied, since the
//     writer may be sealing one of them. Older segments no writer changes.
//   - A segment removed between the listing and its open was dropped
//     (segments are dropped oldest first): the view starts after it.
//   - No mapped byte past a verified record is ever read (see
//     segment.source), so a file trimmed under the view never faults.
//
// viewAttempts bounds the relistings when segments vanish in a way a drop
// does not explain (a cut of the tail by Truncate while the open runs).
const viewAttempts = 20

// maxFollow bounds how many segments a read-only open follows past the
// listing (a writer rolling faster than the open can follow).
const maxFollow = 10000

// afterViewListing, when set (by tests), runs between a read-only open's
// listings and its opening of the segments: where a writer's rolls and
// drops race the open.
var afterViewListing func()

// errRelist asks openView to list the directory again.
var errRelist = errors.New("pagelog: the log changed while it was being opened")

// openView opens the segments of a log opened read-only.
func (l *Log) openView() error {
	base := l.recovery
	var err error
	for range viewAttempts {
		l.recovery = base
		l.recovery.Notes = slices.Clone(base.Notes)
		if err = l.tryView(); !errors.Is(err, errRelist) {
			return err
		}
		_ = l.closeSegments()
	}
	return err
}

func (l *Log) tryView() error {
	// What the checkpoint files know was used, read before the listing:
	// every offset below it was whole before any segment was opened.
	known := checkpointNext(l.dir)
	first, err := listDir(l.dir)
	if err != nil {
		return err
	}
	second, err := listDir(l.dir)
	if err != nil {
		return err
	}
	bases := knownPrefix(first.bases, second.bases)
	if afterViewListing != nil {
		afterViewListing()
	}
	segs := make([]*segment.Segment, 0, len(bases)+2)
	l.segs.Store(&segs)
	if len(bases) == 0 {
		if len(second.bases) > 0 {
			return errRelist // a log being created: every file is new
		}
		l.next.Store(l.meta.FirstOffset)
		return nil
	}
	views := max(0, len(bases)-2)
	for i, base := range bases {
		var s *segment.Segment
		var rep segment.Recovery
		if i < views {
			s, err = segment.OpenSealed(l.cfg, base, bases[i+1])
			if err == nil && views-i <= l.opts.MaxMappedSegments {
				// The newest sealed segments are mapped at the open: a
				// mapping keeps their records readable after the writer
				// drops them, so the log sees every record whole at its
				// open. Older ones of a longer log are mapped when first
				// read; one dropped meanwhile reads as trimmed.
				if err = s.MapNow(); err != nil {
					s.Close()
				}
			}
		} else {
			next := uint64(maxOffset)
			if i+1 < len(bases) {
				next = bases[i+1]
			}
			hint, _ := readHint(l.dir, base, &l.recovery) // noted; a reader goes on without it
			s, rep, err = segment.OpenView(l.cfg, base, next, hint)
		}
		if errors.Is(err, fs.ErrNotExist) {
			if !l.dropped(bases[i+1:]) {
				return errRelist
			}
			// Dropped since the listing, oldest first: so were the ones
			// opened before it.
			for _, s := range segs {
				_ = s.Close()
			}
			segs = segs[:0]
			continue
		}
		if err != nil {
			return err
		}
		segs = append(segs, s)
		l.publish(segs)
		l.viewReport(s, rep)
	}
	if len(segs) == 0 {
		return errRelist
	}
	segs, err = l.follow(segs)
	if err != nil {
		return err
	}
	segs = l.dropEmptyNewest(segs)
	l.publish(segs)
	newest := segs[len(segs)-1]
	// Read again now that the segments are open: a Truncate since the
	// first read removed the checkpoint files (or a later one says less),
	// and the offsets it cut are not lost, only cut.
	known = min(known, checkpointNext(l.dir))
	if known > newest.Next() {
		l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf(
			"offsets [%d, %d) lost: the checkpoint files say the log reached %d, its segments end at %d",
			newest.Next(), known, known, newest.Next()))
		newest.MissingUpTo(known)
	}
	l.next.Store(newest.Next())
	l.recovery.Segments = len(segs)
	for _, s := range segs {
		rep, ok := l.views[s]
		switch {
		case !ok:
		case s == newest:
			l.recovery.Active, l.recovery.Clean = rep, rep.Clean
		case rep.Cut || len(rep.Damaged) > 0 || rep.CleanMismatch != "":
			l.recovery.Sealed = append(l.recovery.Sealed, rep)
		}
	}
	l.views = nil
	return nil
}

// knownPrefix returns the bases of the second listing up to the newest one
// the first listing saw too: a file the second listing misses below it
// would have existed all through that listing, so there is none.
func knownPrefix(first, second []uint64) []uint64 {
	top, ok := uint64(0), false
	for _, b := range second {
		if _, found := slices.BinarySearch(first, b); found {
			top, ok = b, true
		}
	}
	if !ok {
		return nil
	}
	i, _ := slices.BinarySearch(second, top)
	return second[:i+1]
}

// dropped reports whether a segment missing at open was dropped (a newer
// one still exists) rather than cut from the tail.
func (l *Log) dropped(newer []uint64) bool {
	for _, b := range newer {
		if _, err := os.Stat(filepath.Join(l.dir, segment.Name(b, segment.LogSuffix))); err == nil {
			return true
		}
	}
	return false
}

// viewReport keeps what opening a view found, for the report: the newest
// segment's is the active one's; an older view's is reported when it found
// something.
func (l *Log) viewReport(s *segment.Segment, rep segment.Recovery) {
	if !s.View() {
		return
	}
	if l.views == nil {
		l.views = make(map[*segment.Segment]segment.Recovery)
	}
	l.views[s] = rep
}

// follow opens the segments the writer started after the listing: while a
// segment named after the newest view's next offset exists, the view is
// complete and that segment follows it; otherwise the view is refreshed,
// in case records were appended (and then a roll made) since it was read.
func (l *Log) follow(segs []*segment.Segment) ([]*segment.Segment, error) {
	for range maxFollow {
		last := segs[len(segs)-1]
		if last.View() && last.Next() > last.Base() {
			next := last.Next()
			hint, _ := readHint(l.dir, next, &l.recovery)
			s, rep, err := segment.OpenView(l.cfg, next, maxOffset, hint)
			if err == nil {
				segs = append(segs, s)
				l.publish(segs)
				l.viewReport(s, rep)
				continue
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return segs, err
			}
		}
		grew, err := last.Refresh(maxOffset)
		if err != nil || !grew {
			return segs, err
		}
		if rep, ok := l.views[last]; ok {
			// The tail the open stopped at was a record being appended.
			rep.Cut, rep.CutReason = false, ""
			rep.End, rep.Next = last.End(), last.Next()
			l.views[last] = rep
		}
	}
	return segs, nil
}

// dropEmptyNewest handles an empty newest segment after one whose records
// end short of it: a crash during a roll took the older one's unsynced
// tail. A writable open removes the empty one and goes on appending to the
// older; a read-only open ends the log where the older one's records end.
func (l *Log) dropEmptyNewest(segs []*segment.Segment) []*segment.Segment {
	n := len(segs)
	if n < 2 {
		return segs
	}
	s, prev := segs[n-1], segs[n-2]
	if s.Next() != s.Base() || prev.Holds() >= s.Base() {
		return segs
	}
	l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf(
		"empty segment %s follows segment %s, which ends at offset %d, short of it (a crash during a roll): a writable open removes it",
		segment.Name(s.Base(), segment.LogSuffix), segment.Name(prev.Base(), segment.LogSuffix), prev.Holds()))
	_ = s.Close()
	return segs[:n-1]
}
