package main

import (
	"time"

	diskqueue "github.com/nsqio/go-diskqueue"
)

func diskqueueSystem() system {
	return system{
		name: "go-diskqueue",
		setup: "diskqueue.New with 64 MiB files, messages 0..1 MiB, syncEvery 1<<40 and syncTimeout 1 h " +
			"(no periodic fsync, page-cache durability; it still fsyncs the file and its metadata at " +
			"each file roll). Put hands the message to the queue's goroutine, which write()s it and " +
			"answers. Queue cycle: Put, then a receive from ReadChan, which is the delete too " +
			"(diskqueue has no ack: the read position moves when a message is handed out).",
		support: func(w workload) string {
			switch {
			case w.Kind == kindRead:
				return "no read by position: a FIFO read once through ReadChan"
			case w.Kind == kindAppend && w.Sync:
				return "no fsync before OK: Put returns once written, the fsync (every syncEvery Puts) runs after"
			}
			return ""
		},
		open: openDiskqueue,
	}
}

func openDiskqueue(w workload, dir string, _ int) (*store, error) {
	q := diskqueue.New("bench", dir, 64<<20, 0, 1<<20, 1<<40, time.Hour,
		func(diskqueue.LogLevel, string, ...interface{}) {})
	body := makeBody(w.Size)
	switch w.Kind {
	case kindAppend:
		return &store{do: func(int) error { return q.Put(body) }, close: q.Close}, nil
	case kindCycle:
		return &store{
			do: func(int) error {
				if err := q.Put(body); err != nil {
					return err
				}
				// The queue holds only this message: it comes at once.
				return touch(<-q.ReadChan(), w.Size)
			},
			close: q.Close,
		}, nil
	}
	q.Close()
	return nil, errUnsupported
}
