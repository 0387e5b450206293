package queue

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/pagelog/pagelog/engine"
)

// The receive-count log: D/receives/ is an ordinary Log beside the delete
// log (same records, each with its CRC-32C). With MaxReceives > 0, every
// hand-out appends one record before the body is handed out (and, under
// SyncAlways, waits until it is synced): the message's offset, 8 bytes
// big-endian, then its receive count, 4 bytes big-endian. The count of a
// message is the highest count any record names for it, so a lost or
// damaged record costs at most one more hand-out. Segments whose records
// all name messages below a checkpointed head are removed, as the delete
// log's are.
//
// On-disk format: never change, bump the version instead.
const (
	receivesDir        = "receives"
	receiveRecordBytes = 12
)

// receiveLogOptions are the options of the receive-count log: those of the
// delete log.
func receiveLogOptions(o engine.Options, segBytes int64) engine.Options {
	return deleteLogOptions(o, segBytes)
}

// counted is a receive count restored at open.
type counted struct {
	off  uint64
	recv uint32
}

// restoredCounts are the receive counts read at open for messages at or
// above the head, by offset; the cursor takes them as it passes.
type restoredCounts struct {
	c []counted
}

// take returns the restored count of off (0 when none) and forgets those
// below it. Offsets must be asked in increasing order.
func (r *restoredCounts) take(off uint64) uint32 {
	for len(r.c) > 0 && r.c[0].off < off {
		r.c = r.c[1:]
	}
	var n uint32
	if len(r.c) > 0 && r.c[0].off == off {
		n = r.c[0].recv
		r.c = r.c[1:]
	}
	if len(r.c) == 0 {
		r.c = nil
	}
	return n
}

// peek returns the restored count of off (0 when none) and forgets
// nothing.
func (r *restoredCounts) peek(off uint64) uint32 {
	k, ok := slices.BinarySearchFunc(r.c, off, func(x counted, v uint64) int { return cmpU64(x.off, v) })
	if !ok {
		return 0
	}
	return r.c[k].recv
}

// replayReceives reads the receive-count log: the highest count of each
// message at or above head, how many good records it read, and what it
// found damaged. each, when not nil, gets every good record's offset in
// the log and the message offset it names.
func replayReceives(l recordLog, head uint64, each func(at, msg uint64)) ([]counted, int, sideLoss) {
	counts := map[uint64]uint32{}
	var n int
	var loss sideLoss
	for r, err := range l.Records(l.First()) {
		if err == nil && len(r.Body) != receiveRecordBytes {
			err = fmt.Errorf("%w: receive-count record %d has %d bytes, want %d", engine.ErrCorrupt, r.Offset, len(r.Body), receiveRecordBytes)
		}
		loss.walk(r.Offset, err)
		if err != nil {
			continue
		}
		n++
		off, recv := binary.BigEndian.Uint64(r.Body), binary.BigEndian.Uint32(r.Body[8:])
		if each != nil {
			each(r.Offset, off)
		}
		if off >= head {
			counts[off] = max(counts[off], recv)
		}
	}
	out := make([]counted, 0, len(counts))
	for off, recv := range counts {
		out = append(out, counted{off, recv})
	}
	slices.SortFunc(out, func(a, b counted) int {
		switch {
		case a.off < b.off:
			return -1
		case a.off > b.off:
			return 1
		}
		return 0
	})
	loss.end(l.Next())
	return out, n, loss
}

// appendReceive appends the receive-count record of the hand-out of off
// with count recv and returns its offset in the receive-count log. Called
// with q.mu held, so that records and q.recvBuckets agree.
func (q *Queue) appendReceive(off uint64, recv uint32) (uint64, error) {
	var b [receiveRecordBytes]byte
	binary.BigEndian.PutUint64(b[:], off)
	binary.BigEndian.PutUint32(b[8:], recv)
	at, err := appendTo(q.recvs, b[:], nil)
	if err != nil {
		return 0, fmt.Errorf("pagelog: receive-count record of %d: %w", off, err)
	}
	q.recvBuckets.add(at, off)
	return at, nil
}
