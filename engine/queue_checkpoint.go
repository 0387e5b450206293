package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// queue.head, the head checkpoint, replaced atomically (temporary file,
// fsync, rename, directory fsync) now and then and at Close.
//
// On-disk format: never change, bump the version instead.
//
//	byte  size  field
//	0     1     version (1)
//	1     8     head: every message below it is deleted
//	9     4     CRC-32C of bytes 0..8
const (
	headName    = "queue.head"
	headVersion = 1
	headSize    = 13
)

func encodeHead(head uint64) []byte {
	b := make([]byte, headSize)
	b[0] = headVersion
	binary.BigEndian.PutUint64(b[1:], head)
	binary.BigEndian.PutUint32(b[9:], crc32.Checksum(b[:9], castagnoli))
	return b
}

func decodeHead(b []byte) (uint64, error) {
	if err := checkSmallFile(b, headSize, headName, headVersion); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b[1:]), nil
}

// readHead reads queue.head; the error wraps fs.ErrNotExist when there is
// none.
func readHead(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, headName))
	if err != nil {
		return 0, fmt.Errorf("pagelog: read %s: %w", headName, err)
	}
	return decodeHead(b)
}

// checkpointState runs the head checkpoints.
type checkpointState struct {
	mu      sync.Mutex // serializes checkpoints; guards the fields below
	head    uint64     // head in queue.head
	written bool       // queue.head holds head
	timer   Timer
	stopped bool

	shown atomic.Pointer[checkpointReport] // for Stats, without waiting on mu
}

type checkpointReport struct {
	head uint64
	err  error
}

// snapshot returns the head in queue.head and the last checkpoint's error.
func (c *checkpointState) snapshot() (uint64, error) {
	if r := c.shown.Load(); r != nil {
		return r.head, r.err
	}
	return 0, nil
}

// scheduleCheckpoint sets the timer of the next checkpoint.
func (q *Queue) scheduleCheckpoint() {
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	q.ck.shown.Store(&checkpointReport{head: q.ck.head})
	if !q.ck.stopped {
		q.ck.timer = q.clock.AfterFunc(q.opts.CheckpointInterval, q.checkpointTick)
	}
}

func (q *Queue) checkpointTick() {
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	if q.ck.stopped {
		return
	}
	_ = q.checkpoint() // reported by Stats; the next tick tries again
	q.ck.timer = q.clock.AfterFunc(q.opts.CheckpointInterval, q.checkpointTick)
}

// stopCheckpoints stops the timer and writes the last checkpoint.
func (q *Queue) stopCheckpoints() error {
	q.ck.mu.Lock()
	defer q.ck.mu.Unlock()
	q.ck.stopped = true
	if q.ck.timer != nil {
		q.ck.timer.Stop()
	}
	return q.checkpoint()
}

// checkpoint writes the head to queue.head if it moved, then removes the
// segments of both logs that lie wholly below it. Called with q.ck.mu held.
func (q *Queue) checkpoint() error {
	q.mu.Lock()
	head := q.t.Head()
	q.mu.Unlock()
	var err error
	if !q.ck.written || head != q.ck.head {
		err = q.writeHead(head)
	}
	q.ck.shown.Store(&checkpointReport{head: q.ck.head, err: err})
	return err
}

func (q *Queue) writeHead(head uint64) error {
	if q.opts.Log.Sync != SyncNone {
		// Every delete record below head is durable before head is.
		if err := q.dels.Sync(); err != nil {
			return err
		}
	}
	if err := replaceFile(q.dir, headName, encodeHead(head), q.log.opts.FileMode); err != nil {
		return err
	}
	q.ck.head, q.ck.written = head, true
	return q.dropBelow(head)
}

// dropBelow removes the delete-log segments whose records all name
// messages below the checkpointed head, and the message-log segments whose
// messages all lie below it.
func (q *Queue) dropBelow(head uint64) error {
	q.mu.Lock()
	point := q.buckets.dropPoint(head, q.dels.Next())
	q.mu.Unlock()
	_, derr := q.dels.DropBefore(point)
	_, lerr := q.log.DropBefore(head)
	return errors.Join(derr, lerr)
}
