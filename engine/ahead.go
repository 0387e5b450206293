package engine

import (
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/mmapfile"
)

// prefaulter keeps the pages ahead of the writer mapped, so that appends
// copy into resident memory instead of taking a page fault per 4 KiB.
//
// While the writer keeps crossing marks (one every step), the prefaulter
// looks again every prefaultPoll on its own instead of being woken: waking
// a parked goroutine whose thread sleeps is a system call on the
// appender's thread (futexwakeup), about 30 µs on the project's machine.
// It parks once a look finds no mark crossed since the one before, and the
// writer wakes it only then. A writer slower than a mark per prefaultPoll
// still wakes it at most marks, but seldom; one that is faster, or whose
// pages take the prefaulter long to fault in (fresh memory), never does.
// (Under SyncAlways records go in with pwrite and there is no prefaulter.)
//
// How far ahead follows the rate of appends (see adapt): a log starts
// prefaultMin ahead, the distance grows to what the writer appends in
// aheadHorizon (up to prefaultAhead, the distance every log kept before)
// as soon as a look measures that rate. Once the writer crosses no mark
// for idleAfter, the distance comes back down to what the rate since the
// last look needs, and the log gives back what it holds past it (see
// settle), beyond prefaultMin when it appended nothing: an idle
// log keeps about prefaultMin of file past its records, allocated and
// resident, not 8 MiB of each (100 logs in one process took 2 GB).
type prefaulter struct {
	kick   chan struct{}
	mark   int64 // writer-side: the end position at which to kick next
	before int64 // writer-side: bytes of records in the segments before the active one
	seg    atomic.Pointer[segmentRef]

	// minAhead and maxAhead bound the distance (fixed at the start);
	// ahead is the distance now, step the distance between marks and the
	// step the active file is allocated in (set by the prefaulter, read
	// by the writer at each mark and by the preparer).
	minAhead, maxAhead int64
	ahead, step        atomic.Int64

	steps   atomic.Uint64 // marks the writer passed
	polling atomic.Bool   // the prefaulter looks on its own: no kick needed

	// The prefaulter's own: when it last looked and the bytes appended
	// then.
	seenAt    time.Time
	seenBytes int64
}

// segmentRef is the active segment as the prefaulter sees it, with the
// bytes of records appended before it (since the open).
type segmentRef struct {
	s      *segment.Segment
	before int64
}

// written returns the bytes of records appended since the open.
func (r *segmentRef) written() int64 { return r.before + r.s.End() }

const (
	prefaultAhead = 8 << 20   // the farthest ahead of the writer (a fast one)
	prefaultMin   = 256 << 10 // the nearest: a new log's, and an idle one's
	prefaultStep  = 1 << 20   // kick the prefaulter at most every this many bytes

	// prefaultPoll is how often a polling prefaulter looks: the writer
	// crosses a few hundred KiB meanwhile at full speed, well inside
	// prefaultAhead.
	prefaultPoll = 200 * time.Microsecond

	// aheadHorizon: the distance ahead is what the writer appends in this
	// long at the rate a look measured. The prefaulter and the preparer
	// may start tens of milliseconds late on a loaded machine
	// (bench/README.md, "Rolls, again"), and a writer that overtakes the
	// prefaulter slows down to the rate of fresh memory: a horizon of 20
	// ms let the distance fall to 2 MiB at the 100-300 MB/s of a loaded
	// machine, and 5 times as many appends met pages not faulted in as
	// with 8 MiB. From 80 MB/s on, this is the 8 MiB every log kept before.
	aheadHorizon = 100 * time.Millisecond
	// idleAfter: a log whose writer crosses no mark for this long gives
	// back what it holds ahead (settle). Once, from a timer armed as the prefaulter
	// parks: an idle log does no periodic work.
	idleAfter = time.Second
)

// segmentPart returns 1/n of a segment in whole pages, at least one: how
// far small segments are allocated and faulted in ahead.
func (l *Log) segmentPart(n int64) int64 {
	page := int64(mmapfile.PageSize)
	return max((l.cfg.SegmentBytes/n+page-1)/page*page, page)
}

// adaptive reports whether the distance ahead follows the rate: not for
// segments so small that the farthest distance is the nearest.
func (p *prefaulter) adaptive() bool { return p.maxAhead > p.minAhead }

// setAhead sets the distance ahead and the step that goes with it.
func (p *prefaulter) setAhead(n int64) {
	p.ahead.Store(n)
	p.step.Store(max(min(prefaultStep, n/2), int64(mmapfile.PageSize)))
}

// adapt measures the rate of appends since the last look and sets the
// distance ahead from it: raised at once to what the writer appends in
// aheadHorizon (in doublings of minAhead, at most maxAhead), or doubled
// when the writer caught up with the prefaulter (caught: a writer slowed
// down by its own page faults measures a low rate); lowered only when
// lower is set (settle: no mark crossed for idleAfter). On a loaded
// machine (load 18 on two cores) a lowering at any look that measured a
// low rate after a pause of 100 ms let the distance fall to 2 MiB in the
// middle of a gigabyte of appends, and the writer met pages not faulted in
// 2-4 times as often as with 8 MiB. It reports whether it raised the
// distance past the nearest. Called by the prefaulter only.
func (p *prefaulter) adapt(r *segmentRef, now time.Time, caught, lower bool) (busier bool) {
	total := r.written()
	dt := now.Sub(p.seenAt)
	db := max(total-p.seenBytes, 0) // a Truncate moves the total back
	p.seenAt, p.seenBytes = now, total
	if !p.adaptive() || dt <= 0 {
		return false
	}
	need := int64(float64(db) * float64(aheadHorizon) / float64(dt))
	cur := p.ahead.Load()
	want := p.minAhead
	for want < need && want < p.maxAhead {
		want *= 2
	}
	if caught && db > 0 {
		want = max(want, 2*cur)
	}
	want = min(want, p.maxAhead)
	if want > cur || want < cur && lower {
		p.setAhead(want)
	}
	return cur == p.minAhead && want > cur
}

// wrote is called by the writer (under l.mu) after an append.
func (p *prefaulter) wrote(end int64) {
	if p.kick == nil || end < p.mark {
		return
	}
	p.mark = end + p.step.Load()
	p.steps.Add(1)
	if p.polling.Load() {
		return // it looks on its own; it reads steps before it parks
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// startBackground starts the prefaulter and, for SyncInterval, the syncer.
func (l *Log) startBackground() {
	l.startStreams()
	if l.readOnly {
		return
	}
	if l.cfg.WriteThrough {
		// Records go in with pwrite: no page of the mapping is written, so
		// there is nothing to fault in ahead.
		l.startPreparer()
		l.startSyncers()
		return
	}
	if l.opts.RecycleSegments > 0 && l.opts.Sync != SyncAlways {
		l.recycle = &recycler{max: l.opts.RecycleSegments}
		l.recycle.admit = l.admitRecycled
	}
	l.pre.kick = make(chan struct{}, 1)
	// At most a quarter of a segment ahead (whole pages): a log of small
	// segments keeps in its active file about what it holds (64 MiB
	// segments: 8 MiB ahead at most).
	l.pre.maxAhead = min(prefaultAhead, l.segmentPart(4))
	l.pre.minAhead = min(prefaultMin, l.pre.maxAhead)
	l.pre.setAhead(l.pre.minAhead)
	l.pre.seenAt = time.Now()
	l.pre.rolled(l.active)
	l.bg.Add(1)
	go l.prefaultLoop()
	l.startPreparer()
	l.startSyncers()
}

// rolled points the prefaulter at a new active segment and fills its first
// pages at once. Called by the writer (under l.mu).
func (p *prefaulter) rolled(s *segment.Segment) {
	if p.kick == nil {
		return
	}
	if r := p.seg.Load(); r != nil {
		p.before = r.written()
	}
	p.seg.Store(&segmentRef{s: s, before: p.before})
	p.mark = 0
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (l *Log) prefaultLoop() {
	defer l.bg.Done()
	p := &l.pre
	tick := time.NewTimer(prefaultPoll)
	tick.Stop()
	idle := time.NewTimer(idleAfter)
	idle.Stop()
	var idleC <-chan time.Time // idle's channel while it is armed
	for {
		select {
		case <-l.stop:
			return
		case <-p.kick:
		case <-idleC:
			idleC = nil
			l.settle()
			continue
		}
		if idleC != nil {
			idle.Stop()
			idleC = nil
		}
		// Prefault, and while the writer moves, again every prefaultPoll.
		for seen := p.steps.Load(); ; {
			l.prefaultPass()
			p.polling.Store(true)
			tick.Reset(prefaultPoll)
			select {
			case <-l.stop:
				return
			case <-p.kick: // a roll: the new segment at once
				tick.Stop()
				continue
			case <-tick.C:
			}
			if now := p.steps.Load(); now != seen {
				seen = now
				continue
			}
			// Parked from here: the writer kicks again. It adds to steps
			// before it reads polling, and this clears polling before it
			// reads steps, so one of the two sees the other.
			p.polling.Store(false)
			if now := p.steps.Load(); now != seen {
				seen = now
				continue
			}
			break
		}
		if p.adaptive() && (p.ahead.Load() > p.minAhead || l.holdsPrepared()) {
			idle.Reset(idleAfter)
			idleC = idle.C
		}
	}
}

// prefaultPass is one look of the prefaulter: the rate measured, the
// distance set, and the pages up to it faulted in.
func (l *Log) prefaultPass() {
	p := &l.pre
	r := p.seg.Load()
	if r == nil {
		return
	}
	// Caught up: the writer is within half a step of what is faulted in.
	caught := r.s.Populated()-r.s.End() < p.step.Load()/2
	busier := p.adapt(r, time.Now(), caught, false)
	if busier && l.rolls.deferred.CompareAndSwap(true, false) {
		// The prepared segment went as the log went idle: the next one
		// is prepared now that the writer is fast.
		select {
		case l.rolls.kick <- struct{}{}:
		default:
		}
	}
	ahead := p.ahead.Load()
	r.s.Prefault(ahead, ahead/2)
}

// settle runs once the writer crossed no mark for idleAfter: the distance
// is measured again (the nearest when nothing was appended), the active
// segment gives back what it holds past it, and at the nearest distance
// a segment prepared for the next roll is removed (the preparer makes it
// again once the writer is fast). It takes the append lock: no append is
// in flight while the file is cut. Called by the prefaulter only.
func (l *Log) settle() {
	p := &l.pre
	l.mu.Lock()
	if l.closed.Load() || l.active == nil {
		l.mu.Unlock()
		return
	}
	if r := p.seg.Load(); r != nil {
		if r.written() == p.seenBytes {
			p.setAhead(p.minAhead)
		} else {
			// A few appends, no mark: a slow writer, measured as one.
			p.adapt(r, time.Now(), false, true)
		}
	}
	// A failed cut leaves the file as it was: the writer goes on in it,
	// and the next settle tries again.
	_, _ = l.active.TrimAhead(p.ahead.Load())
	l.mu.Unlock()
	if p.ahead.Load() == p.minAhead && l.releasePrepared() {
		l.rolls.deferred.Store(true)
	}
}

// holdsPrepared reports whether a segment is prepared for the next roll.
func (l *Log) holdsPrepared() bool {
	l.rolls.mu.Lock()
	defer l.rolls.mu.Unlock()
	return l.rolls.prepared != nil
}
