package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// Stored is a message as the files of a queue hold it, read by Messages.
type Stored struct {
	Offset uint64 // the offset the message is known by
	// Record is the offset of its record in the log: Offset, or for a
	// message moved out of a held segment (Options.MaxHeldSegments) the
	// offset of its copy.
	Record  uint64
	Body    []byte // valid until the callback returns
	Group   string
	DedupID string
	Due     time.Time // zero when it has none
	// Origin is the offset the message was copied from: for a dead
	// letter, its offset in the source queue; for a redriven message, its
	// offset in the dead letters.
	Origin    uint64
	HasOrigin bool
	Receives  int   // a dead letter's or a moved message's receive count (0 when none)
	Err       error // the record is damaged: Offset is all there is
}

// Messages calls fn for each message of the queue in dir that is not
// deleted, oldest first, until fn returns false. It reads the files
// without opening the queue, as Stat does: no lock is taken and nothing is
// written, so it works beside the process that has the queue open (whose
// messages in flight count as not deleted, and which may delete some
// while Messages runs).
func Messages(dir string, fn func(Stored) bool) error {
	if ok, err := IsQueue(dir); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: %s", ErrNotQueue, dir)
	}
	var head uint64
	if h, err := readHead(dir); err == nil {
		head = h.head
	}
	var st Status
	skip, err := readDeletes(dir, head, &st)
	if err != nil {
		return err
	}
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		return err
	}
	defer l.Close()
	for r, err := range l.Records(max(head, l.First())) {
		if skip.contains(r.Offset) || errors.Is(err, engine.ErrTrimmed) {
			continue // deleted, or dropped below the head meanwhile
		}
		m := Stored{Offset: r.Offset, Record: r.Offset, Err: err}
		if err == nil {
			var a engine.Attrs
			if a, m.Err = r.Attrs(); m.Err == nil {
				m.Body, m.Group, m.DedupID = r.Body, string(a.Group), string(a.Dedup)
				m.Origin, m.HasOrigin, m.Receives = a.Origin, a.HasOrigin, int(a.Receives)
				if a.HasMoved {
					m.Offset = a.Moved
				}
				if a.HasDue {
					m.Due = time.UnixMilli(a.Due)
				}
			}
		}
		if !fn(m) {
			return nil
		}
	}
	return nil
}
