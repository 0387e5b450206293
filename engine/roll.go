package engine

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/pagelog/pagelog/internal/segment"
)

// A roll is off the append path. Creating, allocating and mapping three
// files, and trimming and unmapping the full segment, took 0.3-2.4 ms and
// 1.2-2.4 ms on the project's machine (a 64 MiB segment of 1 KiB records):
// every roll was an append of several milliseconds. So a background
// goroutine prepares the next segment (segment.Prepare) once the active
// one is half full, with its first part allocated and faulted in (until a
// roll takes it), and a roll only renames its .log file (segment.Activate):
// the index files keep their prepared names until a goroutine of the roll
// names them (segment.NameIndexes), beside the appends that follow. Three
// renames, two stat checks and three descriptor swaps under the append
// lock took 120-450 µs per roll on the project's machine; a roll now makes
// one rename there. The preparer waits for the naming before it makes the
// next prepared files (their names are the same), and so do the next roll,
// Truncate and Close (they wait for the roll's goroutine).
// Under SyncNone and SyncInterval the rolled segment is then sealed by a goroutine of its own;
// the next roll, Truncate and DropBefore wait for it, so at most one seal is
// in flight and it is always the newest sealed segment. Under SyncAlways
// the seal, and its syncs, stay on the roll: the append that rolls waits
// for an fdatasync anyway, and a sealed segment must be durable before the
// directory names its successor.

// rollState is the preparer's and the background seal's state.
type rollState struct {
	kick  chan struct{} // wakes the preparer; nil when it does not run
	half  int64         // writer-side: the end position at which to wake it
	start func()        // writer-side: starts the preparer; nil once started

	mu sync.Mutex
	// prepared is the segment for the next roll (under mu). It is offered
	// as soon as its files are mapped, while the preparer may still fault
	// its first pages in.
	prepared *segment.Segment
	// preparing is set while the preparer prepares, activating while a
	// roll renames the prepared files, from its .log's rename until its
	// goroutine has named the index files (under mu): the prepared files
	// have one set of names, so the two must never overlap (a Prepare
	// would remove the files being renamed). Two flags, not one: a roll
	// that found nothing prepared once cleared the preparer's flag, and a
	// skipped kick cleared the roll's.
	preparing, activating bool
	// named is closed when the index files of the segment the last roll
	// took have their names (under mu; nil when no naming is in flight).
	// The preparer waits for it rather than skip its kick.
	named chan struct{}
	// fresh is set while the prepared segment (waiting, or being made) is
	// a new file, not a reused one (under mu): a dropped file kept for
	// reuse then takes its place (see admitRecycled).
	fresh bool

	// sealing is closed when the last roll's goroutine ends: the naming
	// of the new segment's index files, then (SyncNone, SyncInterval) the
	// seal of the full segment (under Log.mu).
	sealing chan struct{}

	retain chan struct{} // wakes the retention loop at a roll; nil without retention

	// beforeNaming, when set (by tests), runs on the roll's goroutine
	// before it names the index files of the segment it took.
	beforeNaming func()

	// deferred is set when the prepared segment was removed as the log
	// went idle (see settle): the prefaulter kicks the preparer again once
	// the writer is fast (see prefaultPass). Until then a roll makes its
	// segment itself, which costs a slow writer a millisecond or two once
	// a segment.
	deferred atomic.Bool
}

// wrote is called by the writer (under l.mu) after an append: past half of
// the segment, the next one is prepared. The preparer's goroutine starts
// at its first kick: a log that never gets that far runs none. (Every
// other kick comes after this one. The writer starts it under l.mu, with
// the log open: before Close waits for the background goroutines.)
func (r *rollState) wrote(end int64) {
	if r.kick == nil || end < r.half {
		return
	}
	r.half = math.MaxInt64
	if r.start != nil {
		r.start()
		r.start = nil
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// startPreparer sets up the goroutine that prepares segments (started by
// the first kick, see wrote), and starts the one that applies retention
// when it is set.
func (l *Log) startPreparer() {
	if l.opts.RetentionBytes > 0 || l.opts.RetentionAge > 0 {
		l.rolls.retain = make(chan struct{}, 1)
		l.bg.Add(1)
		go l.retainLoop(l.rolls.retain)
	}
	l.rolls.kick = make(chan struct{}, 1)
	l.rolls.half = l.cfg.SegmentBytes / 2
	l.rolls.start = func() {
		l.bg.Add(1)
		go l.prepareLoop()
	}
}

func (l *Log) prepareLoop() {
	defer l.bg.Done()
	defer l.dropPrepared()
	for {
		select {
		case <-l.stop:
			return
		case <-l.rolls.kick:
		}
		if !l.awaitNamed() {
			return
		}
		l.rolls.mu.Lock()
		var replaced *segment.Segment
		if l.rolls.prepared != nil && l.rolls.fresh && !l.rolls.preparing && l.recycle.waiting() {
			replaced, l.rolls.prepared = l.rolls.prepared, nil
		}
		skip := l.rolls.prepared != nil || l.rolls.preparing || l.rolls.activating
		var reuse string // a kept file, taken while the decision holds
		if !skip {
			l.rolls.preparing = true
			reuse, _ = l.recycle.take()
			l.rolls.fresh = reuse == ""
		}
		l.rolls.mu.Unlock()
		if replaced != nil {
			_ = replaced.Close()
			replaced.RemoveFiles()
		}
		if skip {
			continue
		}
		// On error (a full disk, say) the roll creates the segment
		// itself and reports the error to the appender.
		s, err := l.prepare(reuse)
		// The first eighth of a segment, at most the prefaulter's reach
		// now (up to 8 MiB of 64 MiB), is allocated and faulted in: the prefaulter
		// takes over from the roll on, and a small log's spare segment
		// does not hold a whole segment of disk. The segment is offered
		// once allocated, before its pages are faulted in, and faulting
		// stops once a roll takes it: in a run that wrote faster than
		// fresh memory came, faulting took 3-155 ms, and 7-19 rolls in 65
		// found nothing prepared and created their segment under the
		// append lock (0.5-5.8 ms each).
		//
		// A full disk stops the allocation: the writer meets the error
		// when it gets there.
		// At least an allocation step (2 MiB, or an eighth of a small
		// segment): a prepared segment is allocated in whole steps.
		part := max(min(l.pre.ahead.Load(), l.segmentPart(8)), min(2<<20, l.segmentPart(8)))
		if err == nil && !l.cfg.WriteThrough {
			_ = s.Preallocate(part)
		}
		l.rolls.mu.Lock()
		l.rolls.prepared = s
		l.rolls.mu.Unlock()
		if s != nil && !l.cfg.WriteThrough {
			s.PrefaultPrepared(part, func() bool { return l.isPrepared(s) })
		}
		l.rolls.mu.Lock()
		l.rolls.preparing = false
		// A new file made while kept files wait (a kept file that could
		// not be reused, or one kept meanwhile): go round again to put
		// one of them in its place. Each round takes a kept file.
		again := s != nil && l.rolls.prepared == s && l.rolls.fresh && l.recycle.waiting()
		l.rolls.mu.Unlock()
		if again {
			select {
			case l.rolls.kick <- struct{}{}:
			default:
			}
		}
	}
}

// isPrepared reports whether s is still the prepared segment, not taken by
// a roll, and the log is not closing (Close waits for the preparer), nor
// is s a new file that a dropped file kept for reuse is to replace.
func (l *Log) isPrepared(s *segment.Segment) bool {
	select {
	case <-l.stop:
		return false
	default:
	}
	l.rolls.mu.Lock()
	defer l.rolls.mu.Unlock()
	return l.rolls.prepared == s && !(l.rolls.fresh && l.recycle.waiting())
}

// admitRecycled runs keep under l.rolls.mu and the recycler's lock, with
// the number of prepared segments (waiting, or being made) that count as
// spare files: the preparer decides under l.rolls.mu too, so the files
// kept for reuse and a reused prepared segment are never more than
// RecycleSegments allows.
//
// A prepared segment made as a new file does not count: a dropped file
// kept takes its place, and the preparer, kicked here, removes it and
// prepares the kept file. When a queue's checkpoints dropped segments
// after the preparer had started the next one (the half of a segment is
// 30 ms at 1 GB/s, a checkpoint's syncs 10-80 ms then), RecycleSegments 1
// reused 20-26 of 64 segments; the rest were new files, whose fresh
// memory the appender met. The new file was allocated an eighth of a
// segment at most, which is what the directory holds beyond RecycleSegments
// until the preparer gets to it.
func (l *Log) admitRecycled(keep func(spare int) bool) bool {
	l.rolls.mu.Lock()
	prepared := l.rolls.prepared != nil || l.rolls.preparing
	spare := 0
	if prepared && !l.rolls.fresh {
		spare = 1
	}
	l.recycle.mu.Lock()
	kept := keep(spare)
	l.recycle.mu.Unlock()
	l.rolls.mu.Unlock()
	// The preparer is kicked only to replace a new file; with nothing
	// prepared, the kept file waits for the next half segment's kick.
	if kept && prepared && spare == 0 && l.rolls.kick != nil {
		select {
		case l.rolls.kick <- struct{}{}:
		default:
		}
	}
	return kept
}

// dropPrepared closes a prepared segment that no roll took and removes its
// files.
func (l *Log) dropPrepared() {
	l.rolls.mu.Lock()
	s := l.rolls.prepared
	l.rolls.prepared = nil
	l.rolls.mu.Unlock()
	if s != nil {
		_ = s.Close()
		s.RemoveFiles()
	}
}

// awaitNamed waits until no roll's naming of index files is in flight (see
// segment.Activate). It reports false when the log closes meanwhile.
func (l *Log) awaitNamed() bool {
	l.rolls.mu.Lock()
	named := l.rolls.named
	l.rolls.mu.Unlock()
	if named == nil {
		return true
	}
	select {
	case <-named:
		return true
	case <-l.stop:
		return false
	}
}

// takePrepared returns the prepared segment activated at base, or nil when
// none is ready (or naming it failed: the roll then creates one). Its
// index files still have their prepared names: the caller has them named
// (nameIndexes) once appends may go on, or gives the segment up
// (giveUpTaken).
func (l *Log) takePrepared(base uint64) *segment.Segment {
	l.rolls.mu.Lock()
	s := l.rolls.prepared
	l.rolls.prepared = nil
	l.rolls.activating = s != nil
	if s != nil {
		l.rolls.named = make(chan struct{})
	}
	l.rolls.mu.Unlock()
	if s == nil {
		return nil
	}
	if err := s.Activate(base); err != nil {
		_ = s.Close()
		s.RemoveFiles()
		l.namedDone()
		return nil
	}
	return s
}

// nameIndexes names the index files of a segment a roll took (on the
// roll's goroutine, off the append lock) and lets the preparer go on.
func (l *Log) nameIndexes(s *segment.Segment) {
	// A failure leaves the index under a prepared name, which the
	// next Prepare removes; the mapping goes on, and an open rebuilds
	// the index from the log.
	_ = s.NameIndexes()
	l.namedDone()
}

// giveUpTaken closes and removes a segment a roll took and could not use.
func (l *Log) giveUpTaken(s *segment.Segment) {
	_ = s.Close()
	s.RemoveFiles() // the index files under the names they have
	if s.IndexPending() {
		l.namedDone()
	}
}

// namedDone ends the activation of the last taken segment.
func (l *Log) namedDone() {
	l.rolls.mu.Lock()
	l.rolls.activating = false
	if l.rolls.named != nil {
		close(l.rolls.named)
		l.rolls.named = nil
	}
	l.rolls.mu.Unlock()
}

// removePreparedLeftovers removes the files of a prepared segment that a
// crash left behind (at a writable open).
func (l *Log) removePreparedLeftovers() {
	for _, suffix := range []string{segment.TimeIndexSuffix, segment.IndexSuffix, segment.LogSuffix} {
		name := segment.PreparedPrefix + suffix
		if err := os.Remove(filepath.Join(l.dir, name)); err == nil {
			l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf("removed %s: a prepared segment that was never used, or the index of a segment a roll had named (rebuilt from its log)", name))
		}
	}
}

// awaitSeal waits for the goroutine of the last roll (the naming of the
// new segment's index files, the background seal of the full one), if one
// is in flight. The caller holds l.mu.
func (l *Log) awaitSeal() {
	if ch := l.rolls.sealing; ch != nil {
		<-ch
		l.rolls.sealing = nil
	}
}

// afterRoll starts the roll's goroutine: it names the index files of s
// when a prepared segment was taken (name), then seals old when it is
// given (SyncNone and SyncInterval). A failed seal makes the log refuse
// appends until it is reopened and recovered, as a failed seal on the
// roll did. The caller holds l.mu.
func (l *Log) afterRoll(s *segment.Segment, name bool, old *segment.Segment) {
	if old != nil && !old.Acquire() {
		old = nil
	}
	if !name && old == nil {
		return
	}
	done := make(chan struct{})
	l.rolls.sealing = done
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		defer close(done)
		if name {
			if h := l.rolls.beforeNaming; h != nil {
				h()
			}
			l.nameIndexes(s)
		}
		if old == nil {
			return
		}
		if err := old.Seal(false); err != nil {
			l.sync.fail(fmt.Errorf("seal %s: %w", old.Path(), err))
		}
		old.Release()
	}()
}

// roll seals the active segment and starts the next one, named after the
// next offset. The new segment comes first (prepared, or created now), so
// that a full disk leaves the active segment as it was and the append can
// be retried.
func (l *Log) roll() (*segment.Segment, error) {
	return l.rollTo(l.active.Next())
}

// rollTo is roll with the new segment's base given: above the active
// segment's next offset only when offsets known to be used were lost (see
// skipLostOffsets).
func (l *Log) rollTo(base uint64) (*segment.Segment, error) {
	old := l.active
	l.awaitSeal()
	s := l.takePrepared(base)
	taken := s != nil
	if s == nil {
		var err error
		if s, err = segment.Create(l.cfg, base); err != nil {
			return nil, err
		}
	}
	old.NoteSealTime()
	var sealOld *segment.Segment
	if l.opts.Sync == SyncAlways {
		// The directory sync below makes the new .log's name durable
		// before any record in it is acknowledged, and comes after the
		// full segment's seal: a sealed segment is durable before the
		// directory names its successor. The new segment's index files
		// are named later (afterRoll); the next directory sync covers
		// them, and a crash before it leaves them under prepared names,
		// removed at the next open with the index rebuilt from the log.
		if err := old.Seal(true); err != nil {
			if taken {
				l.giveUpTaken(s)
			} else {
				_ = s.Close()
				removeSegmentFiles(l.dir, s.Base())
			}
			// A half-sealed segment must never be appended to again (its
			// file may already be trimmed under the mapping): refuse
			// appends until the log is reopened and recovered.
			l.sync.fail(fmt.Errorf("seal %s: %w", old.Path(), err))
			return nil, err
		}
		if err := syncDir(l.dir); err != nil {
			l.sync.fail(err)
			if taken {
				l.nameIndexes(s)
			}
			return nil, err
		}
	} else {
		l.sync.pending = append(l.sync.pending, old)
		l.sync.dirDirty = true
		sealOld = old
	}
	l.afterRoll(s, taken, sealOld)
	segs := append(*l.segs.Load(), s)
	l.publish(segs)
	l.active = s
	l.pre.rolled(s)
	if l.rolls.kick != nil {
		l.rolls.half = l.cfg.SegmentBytes / 2
	}
	if l.rolls.retain != nil {
		select {
		case l.rolls.retain <- struct{}{}:
		default:
		}
	}
	return s, nil
}
