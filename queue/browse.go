package queue

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// Stored is a message as the files of a queue hold it, read by Messages.
type Stored struct {
	Offset uint64 // the offset the message is known by
	// Record is the offset of its record in the log: Offset, or for a
	// message moved out of a held segment (Options.MaxHeldSegments) the
	// offset of its copy.
	Record  uint64
	Body    []byte // valid until the callback returns
	Group   string
	DedupID string
	Due     time.Time // zero when it has none
	// Origin is the offset the message was copied from: for a dead
	// letter, its offset in the source queue; for a redriven message, its
	// offset in the dead letters.
	Origin    uint64
	HasOrigin bool
	Receives  int   // a dead letter's or a moved message's receive count (0 when none)
	Err       error // the record is damaged: Offset is all there is
}

// Messages calls fn for each message of the queue in dir that is not
// deleted, oldest first, until fn returns false. It reads the files
// without opening the queue, as Stat does: no lock is taken and nothing is
// written, so it works beside the process that has the queue open (whose
// messages in flight count as not deleted, and which may delete some
// while Messages runs).
//
// A message moved out of a held segment (Options.MaxHeldSegments) comes
// once, in the order of the offset it is known by, read from its newest
// copy, even while its original or older copies are still in the log (a
// move the next checkpoint has not passed yet, or a crash in the middle of
// one); a delete of any of its records deletes it, as Open has it.
//
// Beside a queue that moves and drops segments while Messages runs, a
// segment dropped while Messages reads it is left out (its records are
// below the owner's head; reused, its file no longer holds them), and a
// message moved out of it meanwhile comes at its copy's place, out of
// offset order. A message moved again and dropped meanwhile can be
// missed, or come as a damaged entry. A caller in the owner's process that
// needs every message in order (a snapshot) holds Queue.PauseDrops while
// it reads.
func Messages(dir string, fn func(Stored) bool) error {
	if ok, err := IsQueue(dir); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: %s", ErrNotQueue, dir)
	}
	var head uint64
	if h, err := readHead(dir); err == nil {
		head = h.head
	}
	var st Status
	skip, err := readDeletes(dir, head, &st, nil)
	if err != nil {
		return err
	}
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		return err
	}
	defer l.Close()
	from := max(head, l.First())
	w := walkMessages(l, from, skip, fn)
	if w.stopped || len(w.dropped) == 0 {
		return nil
	}
	done, dropped, end := w.done, w.dropped, w.end
	// The owner dropped segments under the walk, and may have copied
	// messages out of them past the end the walk read: a log opened
	// read-only stops following its writer once its own newest segment
	// is dropped. A fresh look from there gives them.
	l2, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		return err
	}
	defer l2.Close()
	for r, err := range l2.RecordsWithAttrs(max(end, l2.First())) {
		if err != nil {
			continue
		}
		m := stored(r, nil)
		x := m.Offset
		if m.Err != nil || x == r.Offset || done[x] || !inRanges(dropped, x) {
			continue
		}
		done[x] = true
		if skip.contains(x) || skip.contains(r.Offset) {
			continue
		}
		if !fn(m) {
			return nil
		}
	}
	return nil
}

// browseLog is what walkMessages reads of a queue's message log: a queue
// directory's log, or a store queue's view of its store's.
type browseLog interface {
	messageSource
	Read(offset uint64) (engine.Record, error)
	Records(from uint64) iter.Seq2[engine.Record, error]
}

// walk is where walkMessages stopped.
type walk struct {
	stopped bool            // fn returned false
	end     uint64          // past the last record read
	done    map[uint64]bool // moved messages given to fn, or deleted
	dropped [][2]uint64     // ranges whose segments were dropped under the walk
}

// walkMessages calls fn for each message of l from offset from on that
// skip does not hold, as Messages describes.
func walkMessages(l browseLog, from uint64, skip *skipSet, fn func(Stored) bool) walk {
	copies := movedCopies(l, from)
	done := map[uint64]bool{} // moved messages given to fn, or deleted
	// fromCopy gives fn the moved message x, read from its newest copy.
	fromCopy := func(x uint64) bool {
		done[x] = true
		if copies.deleted(skip.contains, x) {
			return true
		}
		recs := copies[x]
		r, err := l.Read(recs[len(recs)-1])
		if err != nil {
			return fn(Stored{Offset: x, Record: recs[len(recs)-1], Err: err})
		}
		defer r.Release()
		return fn(stored(r, nil))
	}
	// Messages whose original left the log below the head come first.
	var gone []uint64
	for x := range copies {
		if x < from {
			gone = append(gone, x)
		}
	}
	slices.Sort(gone)
	for _, x := range gone {
		if !fromCopy(x) {
			return walk{stopped: true}
		}
	}
	// Ranges of offsets whose segment the owner dropped while this walk
	// read it: a message moved out of such a segment comes at its copy.
	var dropped [][2]uint64
	trimmed, trimming := uint64(0), false
	end := from // past the last record the walk read
	for r, err := range l.Records(from) {
		if err == nil {
			end = r.Offset + 1
		}
		if errors.Is(err, engine.ErrTrimmed) {
			if !trimming {
				trimmed, trimming = r.Offset, true
			}
			continue // dropped behind the head meanwhile
		}
		if trimming {
			dropped, trimming = append(dropped, [2]uint64{trimmed, r.Offset}), false
		}
		m := stored(r, err)
		if _, ok := copies[r.Offset]; ok && (m.Err != nil || m.Offset == r.Offset) {
			if !fromCopy(r.Offset) { // the original: the message comes here
				return walk{stopped: true}
			}
			continue
		}
		if x := m.Offset; m.Err == nil && x != r.Offset {
			// A copy. Its message came at its original (or first, the
			// original being below the head).
			switch {
			case done[x]:
				continue
			case copies[x] != nil: // the original was not in the log
				if !fromCopy(x) {
					return walk{stopped: true}
				}
				continue
			case x >= from && !inRanges(dropped, x):
				continue // made since the first pass: its original came before it
			}
			// Or its original's segment was dropped while this walk read
			// it (moved out of a held segment meanwhile): it comes here.
			done[x] = true
			if skip.contains(x) || skip.contains(r.Offset) {
				continue
			}
		} else if skip.contains(r.Offset) {
			continue // deleted
		}
		if !fn(m) {
			return walk{stopped: true}
		}
	}
	if trimming {
		dropped = append(dropped, [2]uint64{trimmed, math.MaxUint64})
	}
	return walk{end: end, done: done, dropped: dropped}
}

// inRanges reports whether x lies in one of the ranges [from, to).
func inRanges(ranges [][2]uint64, x uint64) bool {
	for _, r := range ranges {
		if x >= r[0] && x < r[1] {
			return true
		}
	}
	return false
}

// stored is the message of record r (read with err).
func stored(r engine.Record, err error) Stored {
	m := Stored{Offset: r.Offset, Record: r.Offset, Err: err}
	if err != nil {
		return m
	}
	var a engine.Attrs
	if a, m.Err = r.Attrs(); m.Err == nil {
		m.Body, m.Group, m.DedupID = r.Body, string(a.Group), string(a.Dedup)
		m.Origin, m.HasOrigin, m.Receives = a.Origin, a.HasOrigin, int(a.Receives)
		if a.HasMoved {
			m.Offset = a.Moved
		}
		if a.HasDue {
			m.Due = time.UnixMilli(a.Due)
		}
	}
	return m
}

// moves are the moved copies a queue's log holds from some offset on:
// the records of each, oldest first, by the offset their message is known
// by.
type moves map[uint64][]uint64

// movedCopies reads the log from offset from (only the records with
// attributes are read whole) and returns the moved copies it holds.
func movedCopies(l messageSource, from uint64) moves {
	copies := moves{}
	for r, err := range l.RecordsWithAttrs(from) {
		if err != nil {
			continue
		}
		if a, err := r.Attrs(); err == nil && a.HasMoved {
			copies[a.Moved] = append(copies[a.Moved], r.Offset)
		}
	}
	return copies
}

// deleted reports whether the moved message x is deleted: gone holds its
// original or any of its copies (as restoreMoved has it at Open).
func (c moves) deleted(gone func(uint64) bool, x uint64) bool {
	return gone(x) || slices.ContainsFunc(c[x], gone)
}

// deletedPast returns whether an offset is deleted for a reader whose
// head moved from head to past over deleted records at its front, and
// then forgot them: every offset in [head, past) is deleted, and skip
// holds the rest.
func deletedPast(skip *skipSet, head, past uint64) func(uint64) bool {
	return func(x uint64) bool { return (x >= head && x < past) || skip.contains(x) }
}
