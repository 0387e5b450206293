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
// roll takes it), and a roll only renames its files (segment.Activate).
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
	// roll renames the prepared files (under mu): the prepared files have
	// one set of names, so the two must never overlap (a Prepare would
	// remove the files being renamed). Two flags, not one: a roll that
	// found nothing prepared once cleared the preparer's flag, and a
	// skipped kick cleared the roll's.
	preparing, activating bool
	// fresh is set while the prepared segment (waiting, or being made) is
	// a new file, not a reused one (under mu): a dropped file kept for
	// reuse then takes its place (see admitRecycled).
	fresh bool

	sealing chan struct{} // closed when the background seal ends (under Log.mu)

	retain chan struct{} // wakes the retention loop at a roll; nil without retention

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

// takePrepared returns the prepared segment activated at base, or nil when
// none is ready (or naming it failed: the roll then creates one).
func (l *Log) takePrepared(base uint64) *segment.Segment {
	l.rolls.mu.Lock()
	s := l.rolls.prepared
	l.rolls.prepared = nil
	l.rolls.activating = s != nil
	l.rolls.mu.Unlock()
	if s == nil {
		return nil
	}
	err := s.Activate(base)
	if err != nil {
		_ = s.Close()
		s.RemoveFiles()
		s = nil
	}
	l.rolls.mu.Lock()
	l.rolls.activating = false
	l.rolls.mu.Unlock()
	return s
}

// removePreparedLeftovers removes the files of a prepared segment that a
// crash left behind (at a writable open).
func (l *Log) removePreparedLeftovers() {
	for _, suffix := range []string{segment.TimeIndexSuffix, segment.IndexSuffix, segment.LogSuffix} {
		name := segment.PreparedPrefix + suffix
		if err := os.Remove(filepath.Join(l.dir, name)); err == nil {
			l.recovery.Notes = append(l.recovery.Notes, fmt.Sprintf("removed %s: a prepared segment that was never used", name))
		}
	}
}

// awaitSeal waits for the background seal of the last roll, if one is in
// flight. The caller holds l.mu.
func (l *Log) awaitSeal() {
	if ch := l.rolls.sealing; ch != nil {
		<-ch
		l.rolls.sealing = nil
	}
}

// sealLater seals old in the background (SyncNone and SyncInterval). A
// failed seal makes the log refuse appends until it is reopened and
// recovered, as a failed seal on the roll did.
func (l *Log) sealLater(old *segment.Segment) {
	if !old.Acquire() {
		return
	}
	done := make(chan struct{})
	l.rolls.sealing = done
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		defer close(done)
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
	if s == nil {
		var err error
		if s, err = segment.Create(l.cfg, base); err != nil {
			return nil, err
		}
	}
	old.NoteSealTime()
	if l.opts.Sync == SyncAlways {
		if err := old.Seal(true); err != nil {
			_ = s.Close()
			removeSegmentFiles(l.dir, s.Base())
			// A half-sealed segment must never be appended to again (its
			// file may already be trimmed under the mapping): refuse
			// appends until the log is reopened and recovered.
			l.sync.fail(fmt.Errorf("seal %s: %w", old.Path(), err))
			return nil, err
		}
		if err := syncDir(l.dir); err != nil {
			l.sync.fail(err)
			return nil, err
		}
	} else {
		l.sync.pending = append(l.sync.pending, old)
		l.sync.dirDirty = true
		l.sealLater(old)
	}
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
