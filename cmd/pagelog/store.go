package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// storeAbout is said in the usage of every queue subcommand: how to name a
// queue of a store.
const storeAbout = "A queue of a store (many queues in one directory, sharing its logs) is named\n" +
	"with --store D --queue NAME instead of --dir; its dead letters are the queue\n" +
	"NAME.dead of the same store. send, receive, delete and redrive open the\n" +
	"store (one process at a time); stats and dead read it beside its owner."

// queueTarget is the queue a `pagelog queue` command works on: the queue
// directory of --dir, or the queue --queue of the store in --store.
type queueTarget struct {
	dir, store, name string
}

// targetFlags adds --dir, --store and --queue to fs.
func targetFlags(fs *flag.FlagSet) *queueTarget {
	t := &queueTarget{}
	fs.StringVar(&t.dir, "dir", "", "queue `directory`")
	fs.StringVar(&t.store, "store", "", "store `directory` (with --queue)")
	fs.StringVar(&t.name, "queue", "", "`name` of the queue in --store")
	return t
}

// check returns -1 when the flags name one queue, the exit status of a
// usage error otherwise.
func (t *queueTarget) check(fs *flag.FlagSet) int {
	switch {
	case t.dir != "" && (t.store != "" || t.name != ""):
		return usageError(fs, "--dir names a queue directory; --store and --queue a queue of a store: not both")
	case t.store != "" && t.name == "":
		return usageError(fs, "--store goes with --queue NAME")
	case t.name != "" && t.store == "":
		return usageError(fs, "--queue goes with --store D")
	case t.store != "":
		if err := queue.CheckQueueName(t.name); err != nil {
			return usageError(fs, "--queue %q: %v", t.name, errText(err))
		}
		return -1
	}
	return requireDir(fs, t.dir)
}

// inStore reports whether the target is a queue of a store.
func (t *queueTarget) inStore() bool { return t.store != "" }

// open opens the target for one of the commands that write, as openQueue
// does (create: only send makes a queue). done closes it, returning err or
// the close's error.
func (t *queueTarget) open(create bool, opts queue.Options) (q *queue.Queue, done func(err error) error, err error) {
	if !t.inStore() {
		q, err := openQueue(t.dir, create, opts)
		if err != nil {
			return nil, nil, err
		}
		return q, func(err error) error { return closeQueue(q, err) }, nil
	}
	s, err := openStore(t.store, create, queue.StoreOptions{Log: opts.Log})
	if err != nil {
		return nil, nil, err
	}
	done = func(err error) error { return errors.Join(err, s.Close()) }
	if !create && !s.Has(t.name) {
		return nil, nil, done(fmt.Errorf("%w: %q in store %s (only `pagelog queue send` creates one)", queue.ErrNoQueue, t.name, t.store))
	}
	q, err = s.QueueWith(t.name, queue.QueueOptions{Visibility: opts.Visibility, MaxReceives: opts.MaxReceives})
	if err != nil {
		return nil, nil, done(err)
	}
	return q, done, nil
}

// openStore opens the store in dir for writing. Unless create, the
// directory must hold a store already; with create, its parent must exist
// and the directory must be new, empty or a store. A store another process
// has open is named as such.
func openStore(dir string, create bool, o queue.StoreOptions) (*queue.Store, error) {
	ok, err := queue.IsStore(dir)
	switch {
	case err != nil:
		return nil, err
	case !ok && !create:
		return nil, fmt.Errorf("%w: %s (only `pagelog queue send` creates one)", queue.ErrNotStore, dir)
	case !ok:
		if st, err := os.Stat(filepath.Dir(filepath.Clean(dir))); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%s: the parent directory does not exist (send creates the store's own directory only)", dir)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			return nil, fmt.Errorf("%s holds files but no store: send creates a store only in an empty or new directory", dir)
		}
	}
	s, err := queue.OpenStore(dir, o)
	if errors.Is(err, engine.ErrLocked) {
		return nil, fmt.Errorf("the store in %s is open in another process: one process at a time may have it open for writing", dir)
	}
	return s, err
}

// stat reads the target without opening it (queue.Stat, or
// queue.StatStoreQueue).
func (t *queueTarget) stat() (queue.Status, error) {
	if t.inStore() {
		return queue.StatStoreQueue(t.store, t.name)
	}
	return queue.Stat(t.dir)
}

// deadLetters returns the walk over the target's dead letters, read
// without opening anything (one that walks nothing when it has none).
func (t *queueTarget) deadLetters() (func(fn func(queue.Stored) bool) error, error) {
	none := func(func(queue.Stored) bool) error { return nil }
	if t.inStore() {
		st, err := queue.StatStore(t.store)
		if err != nil {
			return nil, err
		}
		var has, hasDead bool
		for _, d := range st.Deepest {
			has = has || d.Name == t.name
			hasDead = hasDead || d.Name == t.name+".dead"
		}
		switch {
		case !has:
			return nil, fmt.Errorf("%w: %q in store %s", queue.ErrNoQueue, t.name, t.store)
		case !hasDead:
			return none, nil
		}
		return func(fn func(queue.Stored) bool) error {
			return queue.StoreMessages(t.store, t.name+".dead", fn)
		}, nil
	}
	if ok, err := queue.IsQueue(t.dir); err != nil || !ok {
		return nil, fmt.Errorf("%w: %s", queue.ErrNotQueue, t.dir)
	}
	dead := queue.DeadLetterPath(t.dir)
	if ok, _ := queue.IsQueue(dead); !ok {
		return none, nil
	}
	return func(fn func(queue.Stored) bool) error { return queue.Messages(dead, fn) }, nil
}
