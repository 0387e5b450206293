package main

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

func bboltSystem() *system {
	return &system{
		name: "bbolt",
		setup: "one bolt.Open file (NoSync, otherwise defaults); a queue = a bucket, keys its " +
			"NextSequence as 8 bytes big-endian. Send = one Update with a Put; receive = one Update " +
			"that takes the bucket's first key and deletes it. Touch on reopen = View, Bucket, Stats.",
		receive: true,
		open: func(dir string) (instance, error) {
			db, err := bolt.Open(filepath.Join(dir, "queues.db"), 0o600, &bolt.Options{
				Timeout: time.Second,
				NoSync:  true,
			})
			if err != nil {
				return nil, err
			}
			return &bboltQueues{db: db}, nil
		},
	}
}

type bboltQueues struct{ db *bolt.DB }

func put(b *bolt.Bucket, body []byte) error {
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	return b.Put(binary.BigEndian.AppendUint64(nil, seq), body)
}

func (q *bboltQueues) create(i int, first []byte) error {
	return q.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte(qname(i)))
		if err != nil {
			return err
		}
		return put(b, first)
	})
}

func (q *bboltQueues) bucket(tx *bolt.Tx, i int) (*bolt.Bucket, error) {
	b := tx.Bucket([]byte(qname(i)))
	if b == nil {
		return nil, fmt.Errorf("no bucket %s", qname(i))
	}
	return b, nil
}

func (q *bboltQueues) touch(i int) (int64, error) {
	var n int64
	err := q.db.View(func(tx *bolt.Tx) error {
		b, err := q.bucket(tx, i)
		if err != nil {
			return err
		}
		n = int64(b.Stats().KeyN)
		return nil
	})
	return n, err
}

func (q *bboltQueues) send(i int, body []byte) error {
	return q.db.Update(func(tx *bolt.Tx) error {
		b, err := q.bucket(tx, i)
		if err != nil {
			return err
		}
		return put(b, body)
	})
}

func (q *bboltQueues) receive(i int) error {
	return q.db.Update(func(tx *bolt.Tx) error {
		b, err := q.bucket(tx, i)
		if err != nil {
			return err
		}
		c := b.Cursor()
		k, v := c.First()
		if k == nil {
			return fmt.Errorf("bucket %s is empty", qname(i))
		}
		if err := check(v); err != nil {
			return err
		}
		return c.Delete()
	})
}

func (q *bboltQueues) close() error { return q.db.Close() }
