package main

import (
	"context"
	"fmt"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

func pagelogSystem() system {
	return system{
		name: "pagelog",
		setup: "engine.Log with default options (64 MiB segments, preallocated and mapped). " +
			"Page-cache appends: Sync=SyncNone. Synced appends: Sync=SyncAlways (an fdatasync covers " +
			"the record before Append returns; concurrent appenders share one). Read: Log.Read (checksum " +
			"and id verified, zero-copy) then Release. Queue: queue.Open, default QueueOptions " +
			"(SyncNone, visibility 30 s); Send, Receive, Delete.",
		support: func(workload) string { return "" },
		open:    openPagelog,
	}
}

func openPagelog(w workload, dir string, n int) (*store, error) {
	switch w.Kind {
	case kindAppend:
		opts := engine.Options{}
		if w.Sync {
			opts.Sync = engine.SyncAlways
		}
		l, err := engine.Open(dir, opts)
		if err != nil {
			return nil, err
		}
		body := makeBody(w.Size)
		return &store{
			do: func(int) error {
				_, err := l.Append(body)
				return err
			},
			close: l.Close,
		}, nil
	case kindRead:
		return openPagelogRead(w, dir, n)
	case kindCycle:
		return openPagelogQueue(w, dir)
	}
	return nil, errUnsupported
}

func openPagelogRead(w workload, dir string, n int) (*store, error) {
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		return nil, err
	}
	body := makeBody(w.Size)
	first := l.Next()
	for i := 0; i < n; i++ {
		if _, err := l.Append(body); err != nil {
			l.Close()
			return nil, err
		}
	}
	picks := recentPicks(n)
	return &store{
		do: func(i int) error {
			r, err := l.Read(first + uint64(picks[i&4095]))
			if err != nil {
				return err
			}
			err = touch(r.Body, w.Size)
			r.Release()
			return err
		},
		close: l.Close,
	}, nil
}

// openPagelogQueue drives pagelog's work queue (queue.Queue, issue 4).
func openPagelogQueue(w workload, dir string) (*store, error) {
	q, err := queue.Open(dir, queue.Options{})
	if err != nil {
		return nil, err
	}
	body := makeBody(w.Size)
	ctx := context.Background()
	return &store{
		do: func(int) error {
			off, err := q.Send(body)
			if err != nil {
				return err
			}
			m, err := q.Receive(ctx)
			if err != nil {
				return err
			}
			if m.Offset != off {
				return fmt.Errorf("received offset %d, sent %d", m.Offset, off)
			}
			if err := touch(m.Body, w.Size); err != nil {
				return err
			}
			return q.Delete(m.Offset)
		},
		close: q.Close,
	}, nil
}
