package main

import (
	"fmt"
	"sync"
	"time"

	diskqueue "github.com/nsqio/go-diskqueue"
)

func diskqueueSystem() *system {
	return &system{
		name: "go-diskqueue",
		setup: "diskqueue.New per queue, all in one directory (files named for the queue), 64 MiB " +
			"files, messages 0..1 MiB, syncEvery 1<<40 and syncTimeout 1 h (no periodic fsync; Close " +
			"syncs). Send = Put; receive = a receive from ReadChan, which is the delete too (no ack). " +
			"Touch on reopen = diskqueue.New + Depth. An error the queue only logs (a file it cannot " +
			"open is renamed .bad and skipped) stops the run.",
		receive: true,
		open: func(dir string) (instance, error) {
			return &diskqueues{dir: dir, qs: make(map[int]diskqueue.Interface)}, nil
		},
	}
}

type diskqueues struct {
	dir string
	qs  map[int]diskqueue.Interface

	mu       sync.Mutex
	logErr   error // the first error a queue logged
	reported bool  // logErr was returned already
}

func (d *diskqueues) logf(lvl diskqueue.LogLevel, f string, args ...interface{}) {
	if lvl < diskqueue.ERROR {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.logErr == nil {
		d.logErr = fmt.Errorf("go-diskqueue logged: "+f, args...)
	}
}

// logged returns the first error a queue logged, once.
func (d *diskqueues) logged() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reported {
		return nil
	}
	d.reported = d.logErr != nil
	return d.logErr
}

func (d *diskqueues) openQueue(i int) diskqueue.Interface {
	q := diskqueue.New(qname(i), d.dir, 64<<20, 0, 1<<20, 1<<40, time.Hour, d.logf)
	d.qs[i] = q
	return q
}

func (d *diskqueues) create(i int, first []byte) error {
	if err := d.openQueue(i).Put(first); err != nil {
		return err
	}
	return d.logged()
}

func (d *diskqueues) touch(i int) (int64, error) {
	n := d.openQueue(i).Depth()
	return n, d.logged()
}

func (d *diskqueues) send(i int, body []byte) error {
	if err := d.qs[i].Put(body); err != nil {
		return err
	}
	return d.logged()
}

func (d *diskqueues) receive(i int) error {
	select {
	case b := <-d.qs[i].ReadChan():
		return check(b)
	case <-time.After(jsTimeout):
		if err := d.logged(); err != nil {
			return err
		}
		return fmt.Errorf("%s: no message after %v", qname(i), jsTimeout)
	}
}

func (d *diskqueues) close() error {
	first := d.logged()
	for _, q := range d.qs {
		if err := q.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
