package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/checkpoint"
)

// queue.head, the head checkpoint, replaced atomically (temporary file,
// fsync, rename, directory fsync) now and then and at Close.
//
// On-disk format: never change, bump the version instead.
//
//	version 4 (written by a queue that owns its directory): version (4),
//	then bytes 1..52 as in version 3 (the CRC-32C at 49 covers bytes
//	0..48), then the index of moved copies:
//	53    4     runs n; 0xFFFFFFFF: not recorded (open reads the log)
//	57    16n   runs: from, to (uint64 each; to excluded), ascending
//	57+16n 4    CRC-32C of bytes 0..56+16n
//
//	version 3 (written in a store's heads log; read):
//	byte  size  field
//	0     1     version (3)
//	1     8     head: every message below it is deleted
//	9     8     end: every offset below it was given to a message
//	17    8     deletes from: the delete log holds every record from it on
//	25    8     deletes durable: its records below it were synced
//	33    8     receives from: the same of the receive-count log
//	41    8     receives durable
//	49    4     CRC-32C of bytes 0..48
//
//	version 2 (read): version (2), head (8), end (8), CRC-32C (4).
//	version 1 (read): version (1), head (8), CRC-32C (4); no end.
//
// The side logs' fields say which of their records the queue relies on:
// those from "from" on may name messages at or above the head (the
// checkpoint drops no segment above it), and those below "durable" were
// synced (under SyncNone, written: see sidesDurable). At open, a side log that starts above "from", or ends below
// "durable", lost records: damage, reported with how many (see
// sideLoss). Versions 1 and 2 tell nothing of the side logs: their loss
// is found only where the logs' own walk finds it.
const (
	headName     = "queue.head"
	headVersion  = 4
	headVersion3 = 3
	headSize     = 53 // version 3, and version 4 up to its index
	headVersion2 = 2
	headSize2    = 21
	headVersion1 = 1
	headSize1    = 13
)

// headState is what queue.head holds.
type headState struct {
	head uint64
	end  uint64 // 0 in a version 1 file
	// sides is set when the file records the side logs' spans (version
	// 3): dels and recvs are zero otherwise.
	sides bool
	dels  sideSpan // the delete log
	recvs sideSpan // the receive-count log (zero when there is none)
}

// sideSpan is what queue.head records of one of the queue's side logs
// (the delete log, the receive-count log).
type sideSpan struct {
	from    uint64 // the log holds every record from here on
	durable uint64 // every record below here was synced
}

// encodeHead encodes h in version 3 (a store's heads log).
func encodeHead(h headState) []byte {
	b := make([]byte, headSize)
	b[0] = headVersion3
	binary.BigEndian.PutUint64(b[1:], h.head)
	binary.BigEndian.PutUint64(b[9:], h.end)
	binary.BigEndian.PutUint64(b[17:], h.dels.from)
	binary.BigEndian.PutUint64(b[25:], h.dels.durable)
	binary.BigEndian.PutUint64(b[33:], h.recvs.from)
	binary.BigEndian.PutUint64(b[41:], h.recvs.durable)
	return checkpoint.Seal(b)
}

// encodeHeadIndexed encodes h in version 4, with the index of moved
// copies idx (not recorded when idx.ok is false or it has too many runs).
func encodeHeadIndexed(h headState, idx movedIndex) []byte {
	n := uint32(len(idx.runs))
	if !idx.ok || len(idx.runs) > maxIndexedRuns {
		n, idx.runs = indexNotRecorded, nil
	}
	b := encodeHead(h)
	b[0] = headVersion
	checkpoint.Seal(b)
	b = binary.BigEndian.AppendUint32(b, n)
	for _, r := range idx.runs {
		b = binary.BigEndian.AppendUint64(b, r[0])
		b = binary.BigEndian.AppendUint64(b, r[1])
	}
	b = append(b, 0, 0, 0, 0)
	return checkpoint.Seal(b)
}

// The index of moved copies in queue.head version 4: at most
// maxIndexedRuns runs (16 bytes each), else not recorded.
const (
	maxIndexedRuns   = 1024
	indexNotRecorded = math.MaxUint32
)

// movedIndex is where the moved copies lie in the message log: runs of
// offsets [from, to), ascending, that hold every record carrying the
// `moved` attribute at or above the head and below the end that
// queue.head records. ok is false when nothing is known (a file of an
// older version, an index not recorded or damaged): open reads the log.
// The records are the truth: open reads each one the index names and
// reads the log instead when one of them is not a moved copy.
type movedIndex struct {
	runs [][2]uint64
	ok   bool
	v4   bool   // the file is of version 4 (its index recorded or not)
	why  string // when !ok: why not (for Recovery.MovedFrom)
}

// decodeHeadIndex decodes the index of moved copies of a queue.head whose
// first headSize bytes decodeHead accepted. Damage to it loses the index
// only: the head stays trusted.
func decodeHeadIndex(b []byte) movedIndex {
	if len(b) == 0 || b[0] != headVersion {
		return movedIndex{why: "no index (queue.head of an older version)"}
	}
	bad := func(why string) movedIndex { return movedIndex{v4: true, why: "index damaged: " + why} }
	if len(b) < headSize+8 {
		return bad(fmt.Sprintf("%d bytes", len(b)))
	}
	if got, want := binary.BigEndian.Uint32(b[len(b)-4:]), checkpoint.Sum(b[:len(b)-4]); got != want {
		return bad(fmt.Sprintf("checksum %08x, want %08x", got, want))
	}
	n := binary.BigEndian.Uint32(b[headSize:])
	if n == indexNotRecorded {
		if len(b) != headSize+8 {
			return bad(fmt.Sprintf("%d bytes for an index not recorded", len(b)))
		}
		return movedIndex{v4: true, why: "index not recorded (too many runs)"}
	}
	if n > maxIndexedRuns || len(b) != headSize+8+16*int(n) {
		return bad(fmt.Sprintf("%d runs in %d bytes", n, len(b)))
	}
	idx := movedIndex{runs: make([][2]uint64, n), ok: true, v4: true}
	var prev uint64
	for k := range idx.runs {
		p := b[headSize+4+16*k:]
		from, to := binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:])
		if from >= to || from < prev {
			return bad(fmt.Sprintf("run %d [%d, %d) after %d", k, from, to, prev))
		}
		idx.runs[k], prev = [2]uint64{from, to}, to
	}
	return idx
}

func decodeHead(b []byte) (headState, error) {
	var h headState
	switch {
	case len(b) > 0 && b[0] == headVersion1:
		if err := checkpoint.Check(b, headSize1, headName, headVersion1); err != nil {
			return headState{}, err
		}
		return headState{head: binary.BigEndian.Uint64(b[1:])}, nil
	case len(b) > 0 && b[0] == headVersion2:
		if err := checkpoint.Check(b, headSize2, headName, headVersion2); err != nil {
			return headState{}, err
		}
	case len(b) > 0 && b[0] == headVersion:
		// Version 4: the head's fields as in version 3, then the index of
		// moved copies (decodeHeadIndex), whose damage loses only it.
		if len(b) < headSize {
			return headState{}, &checkpoint.BadFileError{Name: headName, Why: fmt.Sprintf("%d bytes, want at least %d", len(b), headSize)}
		}
		if err := checkpoint.Check(b[:headSize], headSize, headName, headVersion); err != nil {
			return headState{}, err
		}
		h.sides = true
		h.dels = sideSpan{from: binary.BigEndian.Uint64(b[17:]), durable: binary.BigEndian.Uint64(b[25:])}
		h.recvs = sideSpan{from: binary.BigEndian.Uint64(b[33:]), durable: binary.BigEndian.Uint64(b[41:])}
	default:
		if err := checkpoint.Check(b, headSize, headName, headVersion3); err != nil {
			return headState{}, err
		}
		h.sides = true
		h.dels = sideSpan{from: binary.BigEndian.Uint64(b[17:]), durable: binary.BigEndian.Uint64(b[25:])}
		h.recvs = sideSpan{from: binary.BigEndian.Uint64(b[33:]), durable: binary.BigEndian.Uint64(b[41:])}
	}
	h.head, h.end = binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])
	if h.end < h.head {
		return headState{}, &checkpoint.BadFileError{Name: headName, Why: fmt.Sprintf("end %d below head %d", h.end, h.head)}
	}
	return h, nil
}

// readHead reads queue.head; the error wraps fs.ErrNotExist when there is
// none, engine.ErrNewerFile when a newer version wrote it (never
// overwritten), engine.ErrNotRegular when something else is in its place.
func readHead(dir string) (headState, error) {
	h, _, err := readHeadIndexed(dir)
	return h, err
}

// readHeadIndexed is readHead that returns the index of moved copies too.
func readHeadIndexed(dir string) (headState, movedIndex, error) {
	b, err := checkpoint.Read(dir, headName)
	if err != nil {
		return headState{}, movedIndex{}, fmt.Errorf("pagelog: read %s: %w", headName, err)
	}
	if err := checkpoint.Newer(b, headName, headVersion); err != nil {
		return headState{}, movedIndex{}, err
	}
	h, err := decodeHead(b)
	if err != nil {
		return headState{}, movedIndex{}, err
	}
	return h, decodeHeadIndex(b), nil
}

// checkpointState runs the head checkpoints.
type checkpointState struct {
	mu      sync.Mutex  // serializes checkpoints; guards the fields below
	h       headState   // what queue.head holds
	runs    [][2]uint64 // and its index of moved copies (a queue that owns its directory)
	written bool        // queue.head holds h, in the version written
	timer   Timer
	stopped bool
	last    int64 // q.now() at the last checkpoint
	count   int   // checkpoints run since Open (tests watch the decisions by it)

	// Under Queue.mu, not mu (see noteHead): early is set while a
	// checkpoint brought forward has not ended, and held is a drop point
	// the last checkpoint's head passed without dropping the segment
	// below it (the dedup window keeps it).
	early bool
	held  uint64
	// bg counts the goroutines noteHead starts: Close waits for them, so
	// that none runs after it returns.
	bg sync.WaitGroup

	shown atomic.Pointer[checkpointReport] // for Stats, without waiting on mu

	// paused counts the PauseDrops in force; dropPending says a drop was
	// skipped for one (under mu), so the next checkpoint drops even if
	// the head has not moved.
	paused      atomic.Int32
	dropPending bool
}

type checkpointReport struct {
	head uint64
	end  uint64 // the end queue.head holds (tests wait for a checkpoint by it)
	err  error
}

// snapshot returns the head in queue.head and the last checkpoint's error.
func (c *checkpointState) snapshot() (uint64, error) {
	if r := c.shown.Load(); r != nil {
		return r.head, r.err
	}
	return 0, nil
}

// scheduleCheckpoint sets the timer of the next checkpoint.
func (q *Queue) scheduleCheckpoint() {
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	q.ck.shown.Store(&checkpointReport{head: q.ck.h.head, end: q.ck.h.end})
	if q.st != nil {
		// A queue of a store has no timer of its own: the store's
		// checkpoint runs the queues that changed.
		q.ck.last = q.now()
		q.mu.Lock()
		q.settleDrop()
		q.mu.Unlock()
		return
	}
	if !q.ck.stopped {
		q.ck.timer = q.clock.AfterFunc(q.opts.CheckpointInterval, q.checkpointTick)
		q.ck.last = q.now()
		q.mu.Lock()
		q.settleDrop()
		q.mu.Unlock()
	}
}

func (q *Queue) checkpointTick() {
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	if q.ck.stopped {
		return
	}
	_ = q.checkpoint() // reported by Stats; the next tick tries again
	q.ck.timer = q.clock.AfterFunc(q.opts.CheckpointInterval, q.checkpointTick)
}

// A checkpoint is brought forward when the head leaves the message log's
// oldest segment: its segment is then dropped at once, one at a time,
// rather than with the others the head left since the last tick. The
// queue keeps one dropped file for reuse (recycledSegments), so a tick
// that dropped three segments removed two of them, and the log made two
// new files whose fresh memory the appender then met. In the steady state
// at about 1 GB/s through 64 MiB segments, with a tick every 100 ms, only
// 23-39% of the segments were made from dropped files. Early checkpoints
// come at most eight times per CheckpointInterval: each writes and syncs
// queue.head.

// noteHead starts an early checkpoint when the head has left the message
// log's oldest segment. Called with q.mu held, after the head may have
// moved: it reads the log's segment list, without a lock.
//
// Closed, it starts none: every start is under q.mu before closed is set,
// so that Close's wait for them (ck.bg) follows every Add.
func (q *Queue) noteHead() {
	if q.ck.early || q.closed.Load() {
		return
	}
	p, ok := q.log.DropPoint()
	if !ok || q.t.Head() < p || p == q.ck.held {
		return
	}
	q.ck.early = true
	q.ck.bg.Add(1)
	go func() {
		defer q.ck.bg.Done()
		q.checkpointEarly()
	}()
}

// settleDrop runs after each checkpoint, and when the checkpoints start:
// it notes a drop held back, and brings the next checkpoint forward if the
// head left a segment while this one ran. Called with q.ck.mu and q.mu
// held.
func (q *Queue) settleDrop() {
	q.ck.early, q.ck.held = false, 0
	if p, ok := q.log.DropPoint(); ok && p <= q.ck.h.head {
		q.ck.held = p
	}
	q.noteHead()
}

// checkpointEarly runs the next checkpoint now, or as soon as an eighth of
// CheckpointInterval has passed since the last one.
func (q *Queue) checkpointEarly() {
	if q.st != nil {
		// A queue of a store has no timer of its own: the store
		// brings its checkpoint forward (on a goroutine of its own:
		// this one takes no lock a closing queue's caller may hold).
		q.st.s.checkpointSoon(q.st.sq)
		return
	}
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	if q.ck.stopped || q.ck.timer == nil || !q.ck.timer.Stop() {
		// Closing; or the tick is due, or the checkpoints have not
		// started: either settles the drop.
		return
	}
	due := q.ck.last + int64(q.opts.CheckpointInterval/8)
	if wait := due - q.now(); wait > 0 {
		t := q.clock.AfterFunc(time.Duration(wait), q.checkpointTick)
		// The timer counts from the clock's time when it was set, which
		// may have passed due since the look above (a ManualClock advanced
		// meanwhile on another goroutine: its timer would then wait for
		// the next Advance). Look again: a checkpoint due runs now.
		if q.now() < due || !t.Stop() {
			q.ck.timer = t // if it fired, its call waits for mu and sets the next
			return
		}
	}
	_ = q.checkpoint()
	q.ck.timer = q.clock.AfterFunc(q.opts.CheckpointInterval, q.checkpointTick)
}

// PauseDrops keeps the queue's checkpoints from removing segments of its
// logs until resume is called (once; later calls do nothing): a reader of
// the queue's files beside it, such as Messages, then finds every record
// that was there when it began, while moves copy messages and the head
// moves on. raftstore's snapshots hold one while they walk Messages.
// Sends, receives, deletes, moves and the writes of queue.head go on; the
// segments below the head stay on disk until the next checkpoint after
// the last resume.
func (q *Queue) PauseDrops() (resume func()) {
	q.ck.paused.Add(1)
	// A checkpoint that looked before the count went up ends first (an
	// empty critical section: a barrier).
	q.ck.mu.Lock()
	q.ck.mu.Unlock()
	return sync.OnceFunc(func() { q.ck.paused.Add(-1) })
}

// stopCheckpoints stops the timer and writes the last checkpoint.
func (q *Queue) stopCheckpoints() error {
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	q.ck.stopped = true
	if q.ck.timer != nil {
		q.ck.timer.Stop()
	}
	return q.checkpoint()
}

// checkpoint writes the head, the end and the side logs' spans to
// queue.head if any of them moved, then removes the segments of the logs
// that lie wholly below the head. Called with q.ck.mu held.
//
// The end bounds the offsets of new messages after a restart: a power
// failure under SyncNone or SyncInterval can lose the log's unsynced tail,
// but never an offset below the end of a durable checkpoint, which is given
// to no new message (see fillLost).
func (q *Queue) checkpoint() error {
	q.ck.last = q.now()
	q.ck.count++
	defer func() {
		q.mu.Lock()
		q.settleDrop()
		q.mu.Unlock()
	}()
	_, err := q.moveHeld(false)
	if serr := q.syncMoved(); serr != nil {
		q.ck.shown.Store(&checkpointReport{head: q.ck.h.head, end: q.ck.h.end, err: serr})
		return serr // the head must not pass originals whose copies may be lost
	}
	q.mu.Lock()
	h := headState{head: q.t.Head(), sides: true}
	h.dels.from, h.recvs.from = q.sideStarts(h.head)
	held := q.ck.held != 0
	runs := q.mv.trimRuns(h.head)
	q.mu.Unlock()
	if q.st != nil {
		runs = nil // a store's heads log keeps version 3: its queues' opens read the log
	}
	h.end = q.log.Next()
	h.dels.durable, h.recvs.durable = q.sidesDurable()
	if !q.ck.written || h != q.ck.h || !slices.Equal(runs, q.ck.runs) {
		err = errors.Join(err, q.writeHead(h, runs))
	} else if held || q.ck.dropPending {
		// Nothing moved, but the dedup window held back a segment the
		// head has left: its ids may have expired since, and an idle
		// queue would otherwise keep the segment until its next send
		// or delete.
		err = errors.Join(err, q.dropBelow(q.ck.h))
	}
	q.ck.shown.Store(&checkpointReport{head: q.ck.h.head, end: q.ck.h.end, err: err})
	return err
}

// sideStarts returns where the delete log and the receive-count log must
// start for a checkpoint of head: below it, every record names a message
// below head. It never goes below the log's first offset, so that the
// next open finds no segment missing below it that it found there before
// (the open that found them missing reported them). It never takes where
// queue.head says the log started as a floor either: a log started again
// (its directory removed) counts its offsets from 0, and that start would
// let the checkpoint remove new records below it. Called with q.mu and
// q.ck.mu held.
func (q *Queue) sideStarts(head uint64) (dels, recvs uint64) {
	start := func(l recordLog, b *deleteBuckets) uint64 {
		return max(b.dropPoint(head, l.Next()), l.First())
	}
	dels = start(q.dels, &q.buckets)
	if q.recvs != nil {
		recvs = start(q.recvs, &q.recvBuckets)
	}
	return dels, recvs
}

// sidesDurable returns how far the delete log and the receive-count log
// hold every record for sure: how far they were synced, or, under
// SyncNone, which syncs nothing, how far they were written (a crash of
// the process keeps that; a power failure may not, and the records it
// then takes are lost: their deleted messages come back, and the open
// reports them). Without the latter, under SyncNone queue.head would
// vouch for none of their records, and a log removed whole would go
// unreported.
func (q *Queue) sidesDurable() (dels, recvs uint64) {
	end := func(l recordLog) uint64 {
		switch {
		case l == nil:
			return 0
		case q.opts.Log.Sync == engine.SyncNone:
			return l.Next()
		}
		return l.Durable()
	}
	return end(q.dels), end(q.recvs)
}

// writeHead writes h to queue.head, then drops what lies below it. The
// side logs' durable ends are taken again after their sync.
func (q *Queue) writeHead(h headState, runs [][2]uint64) error {
	if q.opts.Log.Sync != engine.SyncNone {
		// Every delete record below head is durable before head is,
		// and the receive-count log is synced too, so that what
		// queue.head records of it covers what it holds (under
		// SyncInterval its own syncs may lag).
		if err := q.dels.Sync(); err != nil {
			return err
		}
		if q.recvs != nil {
			if err := q.recvs.Sync(); err != nil {
				return err
			}
		}
		h.dels.durable, h.recvs.durable = q.sidesDurable()
	}
	if q.st != nil {
		// The store syncs its heads log before it removes anything
		// below h (Store.checkpoint); what the queue drops here is only
		// its map of its records.
		if err := q.st.s.writeHead(q.st.sq, h); err != nil {
			return err
		}
		q.ck.h, q.ck.written = h, true
		return q.dropBelow(h)
	}
	b := encodeHeadIndexed(h, movedIndex{runs: runs, ok: true})
	err := checkpoint.Replace(q.dir, headName, b, q.fileMode())
	if errors.Is(err, syscall.ENOSPC) && q.releaseSpares() > 0 {
		// A full disk: the logs' spare files give the head its space,
		// and the head written lets the segments behind it go.
		err = checkpoint.Replace(q.dir, headName, b, q.fileMode())
	}
	if err != nil {
		return err
	}
	q.ck.h, q.ck.runs, q.ck.written = h, runs, true
	return q.dropBelow(h)
}

// releaseSpares removes the files the queue's logs, and its dead-letter
// queue's, hold ahead of need (see engine.Log.ReleaseSpares) and returns
// how many. The dead letters' directory sits beside the queue's, most
// often on the same disk.
func (q *Queue) releaseSpares() int {
	n := q.log.ReleaseSpares() + q.dels.ReleaseSpares()
	if q.recvs != nil {
		n += q.recvs.ReleaseSpares()
	}
	if q.dead != nil {
		n += q.dead.releaseSpares()
	}
	return n
}

// fileMode is the permission of the queue's files.
func (q *Queue) fileMode() os.FileMode {
	if m := q.opts.Log.FileMode; m != 0 {
		return m
	}
	return 0o600
}

// dropBelow removes the segments of the delete log and the
// receive-count log that lie wholly below the starts h records for them,
// and the message-log segments whose messages all lie below h's head and
// below every record of the dedup window (whose ids must survive a
// restart). h is durable in queue.head: no segment goes that it does not
// let go.
func (q *Queue) dropBelow(h headState) error {
	if q.ck.dropPending = q.ck.paused.Load() > 0; q.ck.dropPending {
		return nil
	}
	msgs := h.head
	if low, ok := q.dedup.low(q.now()); ok {
		msgs = min(msgs, low)
	}
	_, derr := q.dels.DropBefore(h.dels.from)
	var rerr error
	if q.recvs != nil {
		_, rerr = q.recvs.DropBefore(h.recvs.from)
	}
	_, lerr := q.log.DropBefore(msgs)
	return errors.Join(derr, rerr, lerr)
}
