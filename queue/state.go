package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/pagelog/pagelog/engine"

	"github.com/pagelog/pagelog/inflight"
)

// The delete log: D/deletes/ is an ordinary Log (same records, each with
// its CRC-32C). A record's body is the deleted message's offset, 8 bytes
// big-endian, or a range of deleted offsets [from, to), 16 bytes (offsets
// lost in a power failure, see fillLost). Its segments are small so that
// the ones below the head can be removed soon.
//
// On-disk format: never change, bump the version instead.
const (
	deletesDir        = "deletes"
	deleteRecordBytes = 8
	deleteRangeBytes  = 16
)

// deleteSegmentBytes is the delete log's segment size (a variable so that
// tests can make segments roll sooner).
var deleteSegmentBytes int64 = 1 << 20

// Recovery reports what Open found and did.
type Recovery struct {
	Head     uint64 // the head the queue started from
	HeadFrom string // "checkpoint", "log start (no checkpoint)" or "log start (checkpoint damaged)"
	// CheckpointError tells why queue.head was not trusted (nil when it
	// was, or when there was none). The queue then starts from the log's
	// first offset: it may redeliver deleted messages, never lose one.
	CheckpointError error

	DeleteRecords  int // delete records read from the delete log
	DeletesApplied int // of them naming a message at or above the head
	// DeleteDamage reports the damaged delete records, skipped, and the
	// ranges of records the delete log lost (a segment file removed: one
	// report may cover hundreds of records). DeletesLost is how many
	// deleted messages they may bring back: one per record at most (a
	// record of a range names only offsets whose messages are gone), and
	// no more than the messages this open found not deleted.
	DeleteDamage []string
	DeletesLost  uint64

	ReceiveRecords int // receive-count records read from the receive-count log
	ReceiveCounts  int // messages at or above the head with a receive count
	// ReceiveDamage reports the damaged receive-count records, skipped,
	// and the ranges of records the log lost. ReceivesLost is how many
	// records they cover: each may cost its message one more hand-out
	// before it reaches MaxReceives.
	ReceiveDamage []string
	ReceivesLost  uint64
	DedupIDs      int // deduplication ids rebuilt from the end of the log
	// MovedFrom tells where open found the moved copies of held messages
	// (Options.MaxHeldSegments): "queue.head index" (the records its index
	// names, then the log after its end), or "log (why)" when it read the
	// log from the head (no index: a queue.head of an older version or of
	// a store's queue, none, or one damaged; or an index that disagrees
	// with the log, which is never trusted over it).
	MovedFrom string

	// Lost counts messages not deleted whose records the message log no
	// longer holds (its unsynced tail was lost in a power failure under
	// SyncNone or SyncInterval, or a segment file was removed), found at
	// this open: they were deleted with one range record each, and their
	// offsets, like every offset known to have been given out, are never
	// given to a new message.
	Lost uint64

	Log      engine.Recovery // the message log's Open
	Deletes  engine.Recovery // the delete log's Open
	Receives engine.Recovery // the receive-count log's Open (zero when there is none)
}

// deleteLogOptions are the options of the delete log: small segments, at
// most a quarter of the message log's (segBytes; at least 4 KiB), so that
// the bookkeeping of a queue of small segments never takes the disk of
// its messages (a record here is 30 to 40 bytes, a message's often a
// thousand); the queue's permissions and sync policy. Under SyncAlways the
// queue waits for each record itself (outside its lock), so the log runs
// SyncNone.
func deleteLogOptions(o engine.Options, segBytes int64) engine.Options {
	d := engine.Options{
		SegmentBytes: min(deleteSegmentBytes, max(segBytes/4, 4<<10)),
		Sync:         o.Sync,
		SyncInterval: o.SyncInterval,
		FileMode:     o.FileMode,
		DirMode:      o.DirMode,
	}
	if d.Sync == engine.SyncAlways {
		d.Sync = engine.SyncNone
	}
	return d
}

// restore rebuilds the queue's state at open: the head from queue.head, the
// deleted offsets at or above it from the delete log. The cursor starts at
// the head, so every message not deleted is ready at once, lowest offset
// first; deleted ones are skipped as the cursor reaches them. Nothing is
// registered per undeleted message, so memory does not grow with the log.
func (q *Queue) restore() error {
	rec := &q.recovery
	rec.Log, rec.Deletes = q.log.Recovery(), q.dels.Recovery()
	if q.syncEnd {
		// Open knows nothing synced yet; receivers see only durable messages.
		if err := q.log.Sync(); err != nil {
			return err
		}
	}
	h, err := q.startHead()
	if err != nil {
		return err
	}
	skip := q.replayDeletes(h)
	if err := q.skipLost(h, skip); err != nil {
		return err
	}
	if rec.DeletesLost > 0 {
		// No more can come back than the messages found not deleted.
		rec.DeletesLost = min(rec.DeletesLost, q.log.Next()-min(q.log.Next(), h.head+skip.count()))
	}
	q.mv.openHead = max(h.head, q.log.First())
	q.t = inflight.New(q.mv.openHead)
	q.es = newEntries()
	q.skip = skip
	var loss sideLoss
	if q.recvs != nil {
		rec.Receives = q.recvs.Recovery()
		var counts []counted
		counts, rec.ReceiveRecords, loss = replayReceives(q.recvs, q.t.Head(), q.recvBuckets.add)
		// A count names a record the message log may have lost since
		// (a moved copy whose sync a power failure cut short, an
		// unsynced tail): at or past the end no message has a record,
		// and a new message there is not the one counted.
		next := q.log.Next()
		counts = slices.DeleteFunc(counts, func(c counted) bool { return c.off >= next })
		q.restored.c = counts
		rec.ReceiveCounts = len(counts)
		loss.check("receive-count log", q.recvs.First(), q.recvs.Next(), h.recvs, h.sides)
	} else {
		loss.check("receive-count log (gone)", 0, 0, h.recvs, h.sides)
	}
	rec.ReceiveDamage, rec.ReceivesLost = loss.reports, loss.records
	if err := q.skipAhead(); err != nil {
		return err
	}
	rec.Head = q.t.Head()
	return nil
}

// startHead reads the head checkpoint, falling back to the log's first
// offset when there is none or it is damaged. A queue.head that a newer
// version wrote, which the next checkpoint would overwrite, or something
// other than a regular file in its place, fails the open.
func (q *Queue) startHead() (headState, error) {
	rec := &q.recovery
	first := q.log.First()
	var h headState
	var err error
	if q.st != nil {
		var ok bool
		if h, ok = q.st.s.headOf(q.st.sq); !ok {
			err = fs.ErrNotExist
		}
	} else {
		var idx movedIndex
		h, idx, err = readHeadIndexed(q.dir)
		q.mv.index, q.mv.indexEnd = idx, h.end
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rec.HeadFrom = "log start (no checkpoint)"
		return headState{head: first}, nil
	case errors.Is(err, engine.ErrNewerFile) || errors.Is(err, engine.ErrNotRegular):
		return headState{}, err
	case err != nil:
		rec.HeadFrom = "log start (checkpoint damaged)"
		rec.CheckpointError = err
		return headState{head: first}, nil
	}
	rec.HeadFrom = "checkpoint"
	// A queue.head of an older version is written again, with the side
	// logs' spans (and, in a queue's own directory, the index of moved
	// copies), at the next checkpoint.
	q.ck.h, q.ck.written = h, h.sides && (q.st != nil || q.mv.index.v4)
	q.ck.runs = q.mv.index.runs
	return h, nil // a head below the log's first offset: see skipLost
}

// replayDeletes reads the delete log and returns the deleted offsets at or
// above h's head. Damaged records are reported and stepped over: losing
// one only redelivers its message (the delete log is a Log, whose
// recovery never cuts damage followed by a whole record), and so are the
// records h says the log holds and it does not.
func (q *Queue) replayDeletes(h headState) *skipSet {
	rec := &q.recovery
	skip, n, loss := replay(q.dels, h.head, q.buckets.add)
	loss.check("delete log", q.dels.First(), q.dels.Next(), h.dels, h.sides)
	rec.DeleteRecords, rec.DeleteDamage, rec.DeletesLost = n, loss.reports, loss.records
	rec.DeletesApplied = int(skip.count())
	return skip
}

// replay reads the delete log dels and returns the deleted offsets at or
// above head, how many records it read and what it found damaged. each,
// when not nil, gets every good record's offset in the delete log and the
// highest message offset it names.
func replay(dels recordLog, head uint64, each func(at, last uint64)) (*skipSet, int, sideLoss) {
	skip := &skipSet{}
	var n int
	var loss sideLoss
	for r, err := range dels.Records(dels.First()) {
		var from, to uint64
		if err == nil {
			switch len(r.Body) {
			case deleteRecordBytes:
				from = binary.BigEndian.Uint64(r.Body)
				to = from + 1
			case deleteRangeBytes:
				from, to = binary.BigEndian.Uint64(r.Body), binary.BigEndian.Uint64(r.Body[8:])
				if to <= from {
					err = fmt.Errorf("%w: delete record %d names the empty range [%d, %d)", engine.ErrCorrupt, r.Offset, from, to)
				}
			default:
				err = fmt.Errorf("%w: delete record %d has %d bytes, want %d or %d", engine.ErrCorrupt, r.Offset, len(r.Body), deleteRecordBytes, deleteRangeBytes)
			}
		}
		loss.walk(r.Offset, err)
		if err != nil {
			continue
		}
		n++
		if each != nil {
			each(r.Offset, to-1)
		}
		skip.add(max(from, head), to)
	}
	loss.end(dels.Next())
	return skip, n, loss
}

// skipLost handles offsets that were given to messages but that the
// message log no longer holds (its unsynced tail was lost in a power
// failure under SyncNone or SyncInterval, or a segment file was removed):
// queue.head's end, the head and the delete records bound the offsets
// already given out, and the log skips to that bound, so that no new
// message ever takes one of them (the log's own open may have skipped
// already, from its checkpoint files). Every range at or above the head
// that the log holds no record of is then deleted with one range record,
// unless delete records cover it already: its bodies are gone, and handing
// its offsets out would only hand out errors.
func (q *Queue) skipLost(h headState, skip *skipSet) error {
	if need := max(h.head, h.end, skip.end()); need > q.log.Next() {
		if err := q.log.SkipTo(need); err != nil {
			return err
		}
	}
	var lost uint64
	gaps := q.log.Gaps(h.head)
	if first := q.log.First(); h.head < first {
		// The checkpointed head lies below the log's first segment: the
		// segments between are gone (removed, or lost with the disk's
		// unsynced directory entries), with their messages.
		gaps = append([][2]uint64{{h.head, first}}, gaps...)
	}
	for _, g := range gaps {
		for _, r := range skip.uncovered(g[0], g[1]) {
			if _, err := q.appendDeleteRange(r.from, r.to); err != nil {
				return err
			}
			skip.add(r.from, r.to)
			lost += r.to - r.from
		}
	}
	if lost == 0 {
		return nil
	}
	q.recovery.Lost = lost
	return errors.Join(q.log.Sync(), q.dels.Sync())
}

// appendDelete appends the delete record of offset and returns its offset in
// the delete log. Called with q.mu held (or at open), so that records and
// q.buckets agree.
func (q *Queue) appendDelete(offset uint64) (uint64, error) {
	var b [deleteRecordBytes]byte
	binary.BigEndian.PutUint64(b[:], offset)
	at, err := appendTo(q.dels, b[:], nil)
	if err != nil {
		return 0, fmt.Errorf("pagelog: delete record of %d: %w", offset, err)
	}
	q.buckets.add(at, offset)
	return at, nil
}

// appendDeleteRange appends one delete record for the offsets [from, to).
func (q *Queue) appendDeleteRange(from, to uint64) (uint64, error) {
	var b [deleteRangeBytes]byte
	binary.BigEndian.PutUint64(b[:], from)
	binary.BigEndian.PutUint64(b[8:], to)
	at, err := appendTo(q.dels, b[:], nil)
	if err != nil {
		return 0, fmt.Errorf("pagelog: delete record of [%d, %d): %w", from, to, err)
	}
	q.buckets.add(at, to-1)
	return at, nil
}

// skipped reports whether offset, at or above the cursor, is known deleted.
func (q *Queue) skipped(offset uint64) bool { return q.skip.contains(offset) }

// deleteBuckets tracks, per run of deleteBucketSize consecutive delete-log
// offsets, the highest message offset deleted there (+1, 0 when none), so
// that the delete-log segments whose records all name messages below a
// checkpointed head can be found and removed without reading them.
type deleteBuckets struct {
	first uint64   // bucket number of max[0]
	max   []uint64 // 1 + highest message offset per bucket
}

const deleteBucketSize = 1024

func (b *deleteBuckets) add(at, msg uint64) {
	k := at / deleteBucketSize
	if len(b.max) == 0 {
		b.first = k
	}
	if k < b.first {
		return // cannot happen: delete-log offsets only grow
	}
	for uint64(len(b.max)) <= k-b.first {
		b.max = append(b.max, 0)
	}
	i := k - b.first
	b.max[i] = max(b.max[i], msg+1)
}

// dropPoint returns the delete-log offset below which every record names a
// message below head (next, the delete log's end, when all do) and forgets
// the buckets below it.
func (b *deleteBuckets) dropPoint(head, next uint64) uint64 {
	i := 0
	for i < len(b.max) && b.max[i] <= head {
		i++
	}
	if i == len(b.max) {
		b.max = b.max[:0]
		return next
	}
	point := (b.first + uint64(i)) * deleteBucketSize
	b.first += uint64(i)
	b.max = append(b.max[:0], b.max[i:]...)
	return point
}
