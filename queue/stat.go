package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"

	"github.com/pagelog/pagelog/engine"
)

// Status is what the files of a queue directory say, read without opening
// the queue: no lock is taken and nothing is written, so Stat works beside
// the process that has the queue open (its in-flight table lives in that
// process only and is not seen).
type Status struct {
	First    uint64 // oldest offset the message log holds
	End      uint64 // offset of the next send
	Head     uint64 // oldest message not deleted, as the files say
	Messages uint64 // messages not deleted (ready or in flight in the owning process)
	Deleted  uint64 // messages at or above the head that delete records name

	HeadFrom        string // "checkpoint", "log start (no checkpoint)" or "log start (checkpoint damaged)"
	CheckpointError error  // why queue.head was not trusted, nil when it was
	Checkpointed    uint64 // the head queue.head holds (0 when none)
	CheckpointEnd   uint64 // the end queue.head holds (0 in a version 1 file)

	DeleteRecords int // good delete records
	// DeleteDamage reports the damaged delete records and the ranges of
	// records the delete log lost; DeletesLost is how many deleted
	// messages they may bring back (see Recovery.DeletesLost).
	DeleteDamage []string
	DeletesLost  uint64
	// Lost counts messages not deleted whose records the message log no
	// longer holds (a power failure lost them, or a segment file was
	// removed): the next Open deletes them and never gives their offsets
	// to new messages (see Recovery.Lost).
	Lost uint64

	ReceiveRecords int // good receive-count records
	// ReceiveDamage reports the damaged receive-count records and the
	// ranges of records the log lost; ReceivesLost is how many records
	// they cover (see Recovery.ReceivesLost).
	ReceiveDamage []string
	ReceivesLost  uint64
	// DeadLetters counts the messages not deleted of the dead-letter queue
	// in the sibling directory <dir>.dead (0 when there is none).
	DeadLetters uint64

	Log      engine.Recovery // what the read-only open of the message log found
	Deletes  engine.Recovery // and of the delete log
	Receives engine.Recovery // and of the receive-count log (zero when there is none)
}

// ErrNotQueue is returned by Stat (and by tools) for a directory that
// holds no queue.
var ErrNotQueue = errors.New("pagelog: not a queue")

// IsQueue reports whether dir holds a queue: a message log with queue.head
// or a delete log beside it.
func IsQueue(dir string) (bool, error) {
	if ok, err := engine.IsLog(dir); err != nil || !ok {
		return false, err
	}
	if _, err := os.Stat(filepath.Join(dir, headName)); err == nil {
		return true, nil
	}
	return engine.IsLog(filepath.Join(dir, deletesDir))
}

// Stat reads the queue in dir: its positions and how many messages are not
// deleted (from queue.head and the delete log, without handing anything
// out), and what its files say about its recovery.
func Stat(dir string) (Status, error) {
	var st Status
	if ok, err := IsQueue(dir); err != nil {
		return st, err
	} else if !ok {
		return st, fmt.Errorf("%w: %s (no message log with queue.head or a deletes/ log beside it)", ErrNotQueue, dir)
	}
	// queue.head first: the owner only moves it forward, and every offset
	// it names was in the log before it was written, so the log opened
	// after it holds at least that much.
	// queue.head first, the delete log next, the message log last: the
	// owner moves each forward, and whatever one of them names was in the
	// ones read after it when it was written.
	h, herr := readHead(dir)
	var head uint64 // the checkpointed head (0: from the log's start)
	if herr == nil {
		head = h.head
	}
	spans := func(pick func(headState) sideSpan) func() (sideSpan, bool) {
		return func() (sideSpan, bool) { return recheckSpan(dir, h, herr, pick) }
	}
	skip, err := readDeletes(dir, head, &st, spans(func(h headState) sideSpan { return h.dels }))
	if err != nil {
		return st, err
	}
	if err := readReceives(dir, head, &st, spans(func(h headState) sideSpan { return h.recvs })); err != nil {
		return st, err
	}
	if ok, _ := IsQueue(DeadLetterPath(dir)); ok {
		d, err := Stat(DeadLetterPath(dir))
		if err != nil {
			return st, fmt.Errorf("the dead-letter queue: %w", err)
		}
		st.DeadLetters = d.Messages
	}
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		return st, err
	}
	defer l.Close()
	st.Log = l.Recovery()
	st.First, st.End = l.First(), l.Next()
	// queue.head again: the owner may have moved the head and dropped the
	// segments below it since the first read. The newer head says where
	// the log may start; the older end still bounds the log read after it.
	if h2, err := readHead(dir); herr == nil && err == nil {
		h.head = h2.head
	}
	switch {
	case errors.Is(herr, fs.ErrNotExist):
		st.HeadFrom, st.Head = "log start (no checkpoint)", st.First
	case herr != nil:
		st.HeadFrom, st.Head, st.CheckpointError = "log start (checkpoint damaged)", st.First, herr
	default:
		st.HeadFrom, st.Checkpointed, st.CheckpointEnd = "checkpoint", h.head, h.end
		st.Head = h.head
	}
	countMessages(&st, skip, l)
	return st, nil
}

// messageSource is what countMessages reads of a queue's message log: a
// queue directory's log, or a store queue's view of its store's.
type messageSource interface {
	Gaps(from uint64) [][2]uint64
	RecordsWithAttrs(from uint64) iter.Seq2[engine.Record, error]
}

// countMessages finishes st (First, End, Head and CheckpointEnd set) from
// the deleted offsets at or above the head, skip, and the message log l:
// the offsets lost, the head past the deleted ones at its front, and the
// counts of messages deleted and not.
func countMessages(st *Status, skip *skipSet, l messageSource) {
	// What the next Open does with offsets given out but no longer held:
	// the log skips past the highest one known, and the ones not deleted
	// already are lost.
	end := max(st.End, st.Head, st.CheckpointEnd, skip.end())
	gaps := l.Gaps(st.Head)
	if st.Head < st.First {
		gaps = append(gaps, [2]uint64{st.Head, st.First})
	}
	if end > st.End {
		gaps = append(gaps, [2]uint64{st.End, end})
	}
	for _, g := range gaps {
		for _, r := range skip.uncovered(max(g[0], st.Head), g[1]) {
			st.Lost += r.to - r.from
			skip.add(r.from, r.to)
		}
	}
	// The head moves past the deleted offsets at its front, as Open's does.
	st.Head = max(st.Head, st.First)
	head := st.Head
	if r, ok := skip.front(); ok && r.from <= st.Head {
		st.Head = max(st.Head, r.to)
	}
	skip.trimFront(st.Head)
	skip.trimFrom(end)
	st.Deleted = skip.count()
	if end > st.Head {
		st.Messages = end - st.Head - min(st.Deleted, end-st.Head)
	}
	st.DeletesLost = min(st.DeletesLost, st.Messages) // as Open counts them
	// A moved message whose original or older copies are still in the log
	// (a move the next checkpoint has not passed, a crash in the middle of
	// one) is one message, deleted when any of its records is: read from
	// where the head was before it passed the deleted offsets at its front,
	// which may hold one of them.
	copies := movedCopies(l, head)
	gone := deletedPast(skip, head, st.Head)
	for x, recs := range copies {
		counted := 0 // its records the count above took for messages
		if x >= st.Head && x < end && !skip.contains(x) {
			counted++
		}
		for _, r := range recs {
			// A read-only log reads on past its end at Open, where the
			// count above stopped.
			if r >= st.Head && r < end && !skip.contains(r) {
				counted++
			}
		}
		want := 1
		if copies.deleted(gone, x) {
			want = 0
		}
		st.Messages = uint64(max(0, int64(st.Messages)-int64(counted)+int64(want)))
	}
}

// recheckSpan returns the span of a side log that queue.head records
// (pick chooses which), for a log Stat has read after it read h (herr
// its error): false when the file records none. queue.head is read again
// for the start: the owner drops a side log's segments only below the
// start of a durable queue.head, so the newer start covers every drop
// the log showed. The durable end stays the older one, which the log read
// after it reaches.
func recheckSpan(dir string, h headState, herr error, pick func(headState) sideSpan) (sideSpan, bool) {
	if herr != nil || !h.sides {
		return sideSpan{}, false
	}
	span := pick(h)
	if h2, err := readHead(dir); err == nil && h2.sides {
		span.from = pick(h2).from
	}
	return span, true
}

// readDeletes replays the delete log of the queue in dir read-only: the
// deleted offsets at or above head. st gets what it found; span, when not
// nil, gives what queue.head records of the log (see recheckSpan), asked
// once the log is read.
func readDeletes(dir string, head uint64, st *Status, span func() (sideSpan, bool)) (*skipSet, error) {
	if _, err := os.Stat(filepath.Join(dir, deletesDir)); errors.Is(err, fs.ErrNotExist) {
		checkGone(&st.DeleteDamage, &st.DeletesLost, "delete log", span)
		return &skipSet{}, nil // a read-only look creates nothing
	}
	dels, err := engine.OpenReadOnly(filepath.Join(dir, deletesDir), engine.Options{})
	if errors.Is(err, engine.ErrNoLog) || errors.Is(err, fs.ErrNotExist) {
		checkGone(&st.DeleteDamage, &st.DeletesLost, "delete log", span)
		return &skipSet{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer dels.Close()
	st.Deletes = dels.Recovery()
	skip, n, loss := replay(dels, head, nil)
	checkSpan(&loss, "delete log", dels, span)
	st.DeleteRecords, st.DeleteDamage, st.DeletesLost = n, loss.reports, loss.records
	return skip, nil
}

// readReceives reads the receive-count log of the queue in dir read-only,
// if there is one, into st (span as readDeletes's).
func readReceives(dir string, head uint64, st *Status, span func() (sideSpan, bool)) error {
	if _, err := os.Stat(filepath.Join(dir, receivesDir)); errors.Is(err, fs.ErrNotExist) {
		checkGone(&st.ReceiveDamage, &st.ReceivesLost, "receive-count log (gone)", span)
		return nil // a read-only look creates nothing
	}
	l, err := engine.OpenReadOnly(filepath.Join(dir, receivesDir), engine.Options{})
	if errors.Is(err, engine.ErrNoLog) || errors.Is(err, fs.ErrNotExist) {
		checkGone(&st.ReceiveDamage, &st.ReceivesLost, "receive-count log (gone)", span)
		return nil
	}
	if err != nil {
		return err
	}
	defer l.Close()
	st.Receives = l.Recovery()
	_, n, loss := replayReceives(l, head, nil)
	checkSpan(&loss, "receive-count log", l, span)
	st.ReceiveRecords, st.ReceiveDamage, st.ReceivesLost = n, loss.reports, loss.records
	return nil
}

// checkSpan checks the side log l, read, against what queue.head records
// of it (see sideLoss.check).
func checkSpan(loss *sideLoss, what string, l *engine.Log, span func() (sideSpan, bool)) {
	if span == nil {
		return
	}
	first, next := l.First(), l.Next()
	sp, ok := span()
	loss.check(what, first, next, sp, ok)
}

// checkGone checks a side log that is not there at all against what
// queue.head records of it.
func checkGone(reports *[]string, records *uint64, what string, span func() (sideSpan, bool)) {
	if span == nil {
		return
	}
	var loss sideLoss
	sp, ok := span()
	loss.check(what, 0, 0, sp, ok)
	*reports, *records = loss.reports, loss.records
}
