package main

import (
	"sync"

	"github.com/tidwall/wal"
)

// tidwall/wal keeps each segment's bytes in memory (the tail segment always)
// and writes every Write with one write(); NoSync=false adds an fsync.
// Indexes must be contiguous (last+1), so concurrent writers take a lock
// around choosing the index and writing it: the API is single-writer and
// has no group commit.

const tidwallSegment = 64 << 20 // the same roll size as pagelog's default

func tidwallSystem() system {
	return system{
		name: "tidwall/wal",
		setup: "wal.Open with SegmentSize 64 MiB, binary format, default segment cache (2). " +
			"Page-cache appends: NoSync=true (one write() per Write). Synced appends: NoSync=false " +
			"(fsync after every Write). 64 writers: Write holds the log's lock and indexes must be " +
			"last+1, so writers serialize on a mutex (no group commit). Read: Read(index), which copies " +
			"the entry out of the in-memory segment; no checksum in the format.",
		support: func(w workload) string {
			if w.Kind == kindCycle {
				return "no work queue: a log only"
			}
			return ""
		},
		open: func(w workload, dir string, n int) (*store, error) { return openTidwall(w, dir, n, false) },
	}
}

// tidwallNoCopySystem is tidwall/wal read with NoCopy, for contrast: the
// returned slice is part of the segment held in memory, and nothing is
// checked.
func tidwallNoCopySystem() system {
	return system{
		name: "tidwall/wal NoCopy",
		setup: "tidwall/wal opened with NoCopy=true: Read returns a slice of the segment it holds in " +
			"memory (no copy, no checksum). Shown for contrast on the read workload only.",
		support: func(w workload) string {
			if w.Kind != kindRead {
				return "read contrast only (same writes as tidwall/wal)"
			}
			return ""
		},
		open: func(w workload, dir string, n int) (*store, error) { return openTidwall(w, dir, n, true) },
	}
}

func openTidwall(w workload, dir string, n int, noCopy bool) (*store, error) {
	l, err := wal.Open(dir, &wal.Options{
		NoSync:      !w.Sync,
		SegmentSize: tidwallSegment,
		NoCopy:      noCopy,
	})
	if err != nil {
		return nil, err
	}
	body := makeBody(w.Size)
	switch w.Kind {
	case kindAppend:
		var mu sync.Mutex
		next := uint64(1)
		write := func(int) error {
			if err := l.Write(next, body); err != nil {
				return err
			}
			next++
			return nil
		}
		st := &store{do: write, close: l.Close}
		if w.Writers > 1 {
			st.note = "writers serialize on a mutex around Write (indexes must be last+1; no group commit)"
			st.do = func(i int) error {
				mu.Lock()
				defer mu.Unlock()
				return write(i)
			}
		}
		return st, nil
	case kindRead:
		var b wal.Batch
		for i := 1; i <= n; i++ {
			b.Write(uint64(i), body)
			if i%1000 == 0 || i == n {
				if err := l.WriteBatch(&b); err != nil {
					l.Close()
					return nil, err
				}
			}
		}
		picks := recentPicks(n)
		return &store{
			do: func(i int) error {
				data, err := l.Read(uint64(picks[i&4095] + 1))
				if err != nil {
					return err
				}
				return touch(data, w.Size)
			},
			close: l.Close,
		}, nil
	}
	l.Close()
	return nil, errUnsupported
}
