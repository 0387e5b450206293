package main

import (
	"encoding/binary"
	"path/filepath"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bboltBucket = []byte("log")

func bboltSystem() system {
	return system{
		name: "bbolt",
		setup: "bolt.Open with defaults (freelist array, MaxBatchSize 1000, MaxBatchDelay 10 ms); " +
			"one bucket, 8-byte big-endian sequence keys, FillPercent 1.0 (sequential inserts). " +
			"Page-cache appends: NoSync=true, one Update per append. Synced appends: NoSync=false " +
			"(fdatasync at every commit); 1 writer: Update; 64 writers: DB.Batch (its group commit). " +
			"Read: View + Bucket.Get (zero-copy slice of the mapped file, no checksum).",
		support: func(w workload) string {
			if w.Kind == kindCycle {
				return "no work queue: a B+tree of keys"
			}
			return ""
		},
		open: openBbolt,
	}
}

func openBbolt(w workload, dir string, n int) (*store, error) {
	db, err := bolt.Open(filepath.Join(dir, "bench.db"), 0o600, &bolt.Options{
		Timeout: time.Second,
		NoSync:  !w.Sync,
	})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bboltBucket)
		return err
	}); err != nil {
		db.Close()
		return nil, err
	}
	body := makeBody(w.Size)
	put := func(seq uint64) func(tx *bolt.Tx) error {
		key := binary.BigEndian.AppendUint64(nil, seq)
		return func(tx *bolt.Tx) error {
			b := tx.Bucket(bboltBucket)
			b.FillPercent = 1.0
			return b.Put(key, body)
		}
	}
	switch w.Kind {
	case kindAppend:
		var seq atomic.Uint64
		st := &store{
			do:    func(int) error { return db.Update(put(seq.Add(1))) },
			close: db.Close,
		}
		if w.Writers > 1 {
			st.note = "DB.Batch: concurrent Puts share one commit (and one fdatasync)"
			st.do = func(int) error { return db.Batch(put(seq.Add(1))) }
		}
		return st, nil
	case kindRead:
		for i := 0; i < n; i += 1000 {
			if err := db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(bboltBucket)
				b.FillPercent = 1.0
				for k := i; k < min(i+1000, n); k++ {
					if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(k)), body); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				db.Close()
				return nil, err
			}
		}
		picks := recentPicks(n)
		keys := make([][]byte, len(picks))
		for i, p := range picks {
			keys[i] = binary.BigEndian.AppendUint64(nil, uint64(p))
		}
		return &store{
			do: func(i int) error {
				return db.View(func(tx *bolt.Tx) error {
					return touch(tx.Bucket(bboltBucket).Get(keys[i&4095]), w.Size)
				})
			},
			close: db.Close,
		}, nil
	}
	db.Close()
	return nil, errUnsupported
}
