package main

import (
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
)

func raftwalSystem() system {
	return system{
		name: "raft-wal",
		setup: "raftwal.Open with defaults (64 MiB segments, BinaryCodec, bbolt meta store), null logger. " +
			"StoreLog of a raft.Log{Index, Term 1, LogCommand, Data} per append: every StoreLogs writes a " +
			"commit frame and fsyncs before it returns. 64 writers: StoreLogs takes a write lock and " +
			"indexes must be last+1, so writers serialize on a mutex (no group commit in the API). " +
			"Read: GetLog(index) (a pread of the frame into a pooled buffer, then decode with a copy; " +
			"the per-batch CRC is checked at recovery, not on read).",
		support: func(w workload) string {
			switch {
			case w.Kind == kindCycle:
				return "no work queue: a log only"
			case w.Kind == kindAppend && !w.Sync:
				return "no page-cache mode: StoreLogs always fsyncs before it returns"
			}
			return ""
		},
		open: openRaftwal,
	}
}

func openRaftwal(w workload, dir string, n int) (*store, error) {
	l, err := raftwal.Open(dir, raftwal.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		return nil, err
	}
	body := makeBody(w.Size)
	switch w.Kind {
	case kindAppend:
		var mu sync.Mutex
		next := uint64(1)
		write := func(int) error {
			if err := l.StoreLog(&raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: body}); err != nil {
				return err
			}
			next++
			return nil
		}
		st := &store{do: write, close: l.Close}
		if w.Writers > 1 {
			st.note = "writers serialize on a mutex around StoreLog (indexes must be last+1; one fsync each)"
			st.do = func(i int) error {
				mu.Lock()
				defer mu.Unlock()
				return write(i)
			}
		}
		return st, nil
	case kindRead:
		batch := make([]*raft.Log, 0, 1000)
		for i := 1; i <= n; i++ {
			batch = append(batch, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: body})
			if len(batch) == cap(batch) || i == n {
				if err := l.StoreLogs(batch); err != nil {
					l.Close()
					return nil, err
				}
				batch = batch[:0]
			}
		}
		picks := recentPicks(n)
		var rec raft.Log
		return &store{
			do: func(i int) error {
				if err := l.GetLog(uint64(picks[i&4095]+1), &rec); err != nil {
					return err
				}
				return touch(rec.Data, w.Size)
			},
			close: l.Close,
		}, nil
	}
	l.Close()
	return nil, errUnsupported
}
