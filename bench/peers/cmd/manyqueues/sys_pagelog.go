package main

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// pagelogSegmentBytes is the segment size of the per-directory queues: the
// default 64 MiB, preallocated, would be 640 GiB at 10,000 queues.
const pagelogSegmentBytes = 1 << 20

func pagelogDirsSystem() *system {
	return &system{
		name: "pagelog dirs",
		setup: "queue.Open per queue, one directory each (dir/q000000 ...), Log.SegmentBytes 1 MiB, " +
			"other options default (SyncNone, visibility 30 s). Send; receive = Receive + Delete. " +
			"Touch on reopen = queue.Open + Stats.",
		receive: true,
		open: func(dir string) (instance, error) {
			p := &pagelogQueues{qs: make(map[int]*queue.Queue)}
			p.get = func(i int) (*queue.Queue, error) {
				return queue.Open(filepath.Join(dir, qname(i)), queue.Options{
					Log: engine.Options{SegmentBytes: pagelogSegmentBytes},
				})
			}
			p.closeAll = func() error {
				var errs []error
				for _, q := range p.qs {
					errs = append(errs, q.Close())
				}
				return errors.Join(errs...)
			}
			return p, nil
		},
	}
}

// pagelogQueues drives pagelog queues, however they are opened.
type pagelogQueues struct {
	get      func(i int) (*queue.Queue, error) // opens queue i, making it if new
	closeAll func() error
	qs       map[int]*queue.Queue
}

func (p *pagelogQueues) queue(i int) (*queue.Queue, error) {
	q, err := p.get(i)
	if err != nil {
		return nil, err
	}
	p.qs[i] = q
	return q, nil
}

func (p *pagelogQueues) create(i int, first []byte) error {
	q, err := p.queue(i)
	if err != nil {
		return err
	}
	_, err = q.Send(first)
	return err
}

func (p *pagelogQueues) touch(i int) (int64, error) {
	q, err := p.queue(i)
	if err != nil {
		return 0, err
	}
	return int64(q.Stats().Messages), nil
}

func (p *pagelogQueues) send(i int, body []byte) error {
	_, err := p.qs[i].Send(body)
	return err
}

func (p *pagelogQueues) receive(i int) error {
	q := p.qs[i]
	m, err := q.Receive(context.Background())
	if err != nil {
		return err
	}
	if err := check(m.Body); err != nil {
		return err
	}
	return q.Delete(m.Offset)
}

func (p *pagelogQueues) close() error { return p.closeAll() }
