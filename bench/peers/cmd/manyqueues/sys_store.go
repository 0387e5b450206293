package main

import (
	"github.com/pagelog/pagelog/queue"
)

// pagelogStoreSystem is pagelog's Store: many named queues in one directory.
var pagelogStoreSystem = &system{
	name: "pagelog store",
	setup: "queue.OpenStore(dir, StoreOptions{}) once, then Store.Queue(name) per queue; Send; " +
		"receive = Receive + Delete. Touch on reopen = Store.Queue + Stats. Store.Close closes " +
		"every queue.",
	receive: true,
	open: func(dir string) (instance, error) {
		s, err := queue.OpenStore(dir, queue.StoreOptions{})
		if err != nil {
			return nil, err
		}
		return &pagelogQueues{
			get:      func(i int) (*queue.Queue, error) { return s.Queue(qname(i)) },
			closeAll: s.Close,
			qs:       make(map[int]*queue.Queue),
		}, nil
	},
}
