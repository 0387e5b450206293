package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/pagelog/pagelog/inflight"
)

// The delete log: D/deletes/ is an ordinary Log (same records, each with
// its CRC-32C) whose record bodies are the deleted message's offset, 8 bytes
// big-endian. Its segments are small so that the ones below the head can be
// removed soon.
//
// On-disk format: never change, bump the version instead.
const (
	deletesDir        = "deletes"
	deleteRecordBytes = 8
)

// deleteSegmentBytes is the delete log's segment size (a variable so that
// tests can make segments roll sooner).
var deleteSegmentBytes int64 = 1 << 20

// QueueRecovery reports what OpenQueue found and did.
type QueueRecovery struct {
	Head     uint64 // the head the queue started from
	HeadFrom string // "checkpoint", "log start (no checkpoint)" or "log start (checkpoint damaged)"
	// CheckpointError tells why queue.head was not trusted (nil when it
	// was, or when there was none). The queue then starts from the log's
	// first offset: it may redeliver deleted messages, never lose one.
	CheckpointError error

	DeleteRecords  int      // delete records read from the delete log
	DeletesApplied int      // of them naming a message at or above the head
	DeleteDamage   []string // damaged delete records, skipped (each may cause a redelivery)

	// Placeholders counts empty records appended so that offsets are never
	// reused, when the head or the delete log named offsets the message
	// log had lost (possible after a power failure under SyncNone or
	// SyncInterval). They count as deleted.
	Placeholders uint64

	Log     Recovery // the message log's Open
	Deletes Recovery // the delete log's Open
}

// deleteLogOptions are the options of the delete log: small segments, the
// queue's permissions and sync policy. Under SyncAlways the queue waits
// for each record itself (outside its lock), so the log runs SyncNone.
func deleteLogOptions(o Options) Options {
	d := Options{
		SegmentBytes: deleteSegmentBytes,
		Sync:         o.Sync,
		SyncInterval: o.SyncInterval,
		FileMode:     o.FileMode,
		DirMode:      o.DirMode,
	}
	if d.Sync == SyncAlways {
		d.Sync = SyncNone
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
	head := q.startHead()
	skip, err := q.fillLost(head, q.replayDeletes(head))
	if err != nil {
		return err
	}
	q.t = inflight.New(head)
	q.skip = skip
	if err := q.skipAhead(); err != nil {
		return err
	}
	rec.Head = q.t.Head()
	return nil
}

// startHead reads the head checkpoint, falling back to the log's first
// offset when there is none or it is damaged.
func (q *Queue) startHead() uint64 {
	rec := &q.recovery
	first := q.log.First()
	head, err := readHead(q.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rec.HeadFrom = "log start (no checkpoint)"
		return first
	case err != nil:
		rec.HeadFrom = "log start (checkpoint damaged)"
		rec.CheckpointError = err
		return first
	}
	rec.HeadFrom = "checkpoint"
	q.ck.head, q.ck.written = head, true
	return max(head, first)
}

// replayDeletes reads the delete log and returns the deleted offsets at or
// above head, sorted and without repeats. Damaged records are reported and
// skipped: losing one only redelivers its message.
func (q *Queue) replayDeletes(head uint64) []uint64 {
	rec := &q.recovery
	var skip []uint64
	for r, err := range q.dels.Records(q.dels.First()) {
		if err == nil && len(r.Body) != deleteRecordBytes {
			err = fmt.Errorf("%w: delete record %d has %d bytes, want %d", ErrCorrupt, r.Offset, len(r.Body), deleteRecordBytes)
		}
		if err != nil {
			rec.DeleteDamage = append(rec.DeleteDamage, err.Error())
			continue
		}
		msg := binary.BigEndian.Uint64(r.Body)
		rec.DeleteRecords++
		q.buckets.add(r.Offset, msg)
		if msg >= head {
			skip = append(skip, msg)
		}
	}
	slices.Sort(skip)
	skip = slices.Compact(skip)
	rec.DeletesApplied = len(skip)
	return skip
}

// fillLost appends empty placeholder records when the head or a delete
// record names an offset the message log does not hold (its tail was lost
// in a power failure under SyncNone or SyncInterval), so that no new
// message takes an offset already known as deleted. Placeholders at or
// above the head that were not deleted get a delete record too.
func (q *Queue) fillLost(head uint64, skip []uint64) ([]uint64, error) {
	need := head
	if n := len(skip); n > 0 {
		need = max(need, skip[n-1]+1)
	}
	for next := q.log.Next(); next < need; next = q.log.Next() {
		off, err := q.log.Append(nil)
		if err != nil {
			return nil, err
		}
		q.recovery.Placeholders++
		if _, found := slices.BinarySearch(skip, off); off >= head && !found {
			if _, err := q.appendDelete(off); err != nil {
				return nil, err
			}
			skip = insertSorted(skip, off)
		}
	}
	if q.recovery.Placeholders > 0 {
		if err := errors.Join(q.log.Sync(), q.dels.Sync()); err != nil {
			return nil, err
		}
	}
	return skip, nil
}

// appendDelete appends the delete record of offset and returns its offset in
// the delete log. Called with q.mu held (or at open), so that records and
// q.buckets agree.
func (q *Queue) appendDelete(offset uint64) (uint64, error) {
	var b [deleteRecordBytes]byte
	binary.BigEndian.PutUint64(b[:], offset)
	at, err := q.dels.Append(b[:])
	if err != nil {
		return 0, fmt.Errorf("pagelog: delete record of %d: %w", offset, err)
	}
	q.buckets.add(at, offset)
	return at, nil
}

// skipped reports whether offset, at or above the cursor, is known deleted.
func (q *Queue) skipped(offset uint64) bool {
	_, found := slices.BinarySearch(q.skip, offset)
	return found
}

// insertSorted inserts v into the ascending slice s unless it is there.
func insertSorted(s []uint64, v uint64) []uint64 {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}

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
