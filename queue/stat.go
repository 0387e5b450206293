package queue

import (
	"errors"
	"fmt"
	"io/fs"
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

	DeleteRecords int      // good delete records
	DeleteDamage  []string // damaged delete records (each may redeliver one message)
	// Lost counts offsets queue.head's end names but the message log no
	// longer holds (a power failure lost them): the next Open skips them.
	Lost uint64

	Log     engine.Recovery // what the read-only open of the message log found
	Deletes engine.Recovery // and of the delete log
}

// ErrNotQueue is returned by Stat (and by tools) for a directory that
// holds no queue.
var ErrNotQueue = errors.New("pagelog: not a queue")

// IsQueue reports whether dir holds a queue: a message log with a delete
// log beside it.
func IsQueue(dir string) (bool, error) {
	if ok, err := engine.IsLog(dir); err != nil || !ok {
		return false, err
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
		return st, fmt.Errorf("%w: %s (no message log with a deletes/ log beside it)", ErrNotQueue, dir)
	}
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		return st, err
	}
	defer l.Close()
	dels, err := engine.OpenReadOnly(filepath.Join(dir, deletesDir), engine.Options{})
	if err != nil {
		return st, err
	}
	defer dels.Close()
	st.Log, st.Deletes = l.Recovery(), dels.Recovery()
	st.First, st.End = l.First(), l.Next()
	h, err := readHead(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st.HeadFrom, st.Head = "log start (no checkpoint)", st.First
	case err != nil:
		st.HeadFrom, st.Head, st.CheckpointError = "log start (checkpoint damaged)", st.First, err
	default:
		st.HeadFrom, st.Checkpointed, st.CheckpointEnd = "checkpoint", h.head, h.end
		st.Head = max(h.head, st.First)
	}
	skip, n, damage := replay(dels, st.Head, nil)
	st.DeleteRecords, st.DeleteDamage = n, damage
	if st.CheckpointEnd > st.End {
		st.Lost = st.CheckpointEnd - st.End
	}
	// Deleted offsets beyond the end are lost ones (the next Open skips
	// the log past them): only those below the end count here.
	skip.trimFrom(st.End)
	st.Deleted = skip.count()
	if st.End > st.Head {
		st.Messages = st.End - st.Head - min(st.Deleted, st.End-st.Head)
	}
	return st, nil
}
