package queue

import (
	"context"
	"iter"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// recordLog is what a queue reads and writes on each of its logs (the
// message log, the delete log, the receive-count log). A queue that owns
// its directory uses *engine.Log for each; a queue of a Store uses a view
// of the store's shared logs that numbers the queue's own records 0, 1,
// 2, ... as a log of its own would (see storeView).
type recordLog interface {
	Append(body []byte) (uint64, error)
	AppendWith(body []byte, attrs *engine.Attrs) (uint64, error)
	AppendBatch(bodies [][]byte, attrs []*engine.Attrs) (first uint64, n int, err error)
	Read(offset uint64) (engine.Record, error)
	Records(from uint64) iter.Seq2[engine.Record, error]
	RecordsWithAttrs(from uint64) iter.Seq2[engine.Record, error]
	OffsetForTime(t time.Time) (uint64, error)
	First() uint64
	Next() uint64
	Gaps(from uint64) [][2]uint64
	SkipTo(next uint64) error
	Sync() error
	Durable() uint64
	WaitDurable(ctx context.Context, offset uint64) error
	DropPoint() (offset uint64, ok bool)
	DropBefore(offset uint64) (int, error)
	ReleaseSpares() int
	MaxRecordBytes() int
	SegmentBytes() int64
	Recovery() engine.Recovery
	Stats() engine.LogStats
	Close() error
}

// messageLog is the message log: a recordLog that also tells the held
// segments' moves how its records fall into segments.
type messageLog interface {
	recordLog
	// segments returns how many segments hold the log's records.
	segments() int
	// oldestSegment returns the offsets that begin the log's two oldest
	// segments: the oldest holds [b0, b1).
	oldestSegment() (b0, b1 uint64, ok bool)
	// moveLimit is the most live messages moved for the first time that
	// the oldest segment, holding [b0, b1), may hold for a move to take
	// them: an eighth of its records, at most MaxMovedPerSegment.
	moveLimit(b0, b1 uint64) int
	// appendBatchNoWait is AppendBatch that does not wait for the sync
	// under SyncAlways: a move appends its copies under the queue's lock
	// and waits for them (WaitDurable) after it has let the lock go.
	appendBatchNoWait(bodies [][]byte, attrs []*engine.Attrs) (first uint64, n int, err error)
}

// dirLog is the message log of a queue that owns its directory.
type dirLog struct {
	*engine.Log
	dir string
}

func (l dirLog) segments() int { return l.Stats().Segments }

func (l dirLog) moveLimit(b0, b1 uint64) int { return moveLimit(b0, b1) }

func (l dirLog) appendBatchNoWait(bodies [][]byte, attrs []*engine.Attrs) (uint64, int, error) {
	return l.AppendBatchNoWait(bodies, attrs)
}

// oldestSegment reads the segment names from the directory (the engine
// does not list its segments).
func (l dirLog) oldestSegment() (b0, b1 uint64, ok bool) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return 0, 0, false
	}
	first := l.First()
	var bases []uint64
	for _, e := range ents {
		name, found := strings.CutSuffix(e.Name(), ".log")
		if !found || len(name) != 20 {
			continue
		}
		b, err := strconv.ParseUint(name, 10, 64)
		if err != nil || b < first {
			continue
		}
		bases = append(bases, b)
		if len(bases) == 2 {
			break // names sort as numbers
		}
	}
	if len(bases) < 2 || bases[0] != first {
		return 0, 0, false
	}
	return bases[0], bases[1], true
}

// appendTo is l.AppendWith on the concrete log, so that body and attrs do
// not escape to the heap as the arguments of an interface call do: a send,
// a delete and a receive count allocate nothing.
func appendTo(l recordLog, body []byte, attrs *engine.Attrs) (uint64, error) {
	switch l := l.(type) {
	case *engine.Log:
		return l.AppendWith(body, attrs)
	case dirLog:
		return l.Log.AppendWith(body, attrs)
	case *storeView:
		return l.AppendWith(body, attrs)
	}
	panic("queue: a log of unknown type")
}
