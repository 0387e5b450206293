package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// storeDemoQueues is how many queues the store phase of the demo makes.
const storeDemoQueues = 10_000

// storePhase runs many queues in one store (d.dir/store): it creates
// storeDemoQueues queues and sends one message to each, measuring the
// time per queue and what the process holds (memory, descriptors,
// mappings); then it reopens the store and receives and deletes every
// message.
func (d *demo) storePhase() (err error) {
	dir := filepath.Join(d.dir, "store")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	names := make([]string, storeDemoQueues)
	for i := range names {
		names[i] = fmt.Sprintf("q%05d", i)
	}
	rss0, fds0, maps0, known := processFigures()
	t0 := time.Now()
	s, err := queue.OpenStore(dir, queue.StoreOptions{})
	if err != nil {
		return err
	}
	defer func() {
		if s != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	for i, name := range names {
		q, err := s.Queue(name)
		if err != nil {
			return err
		}
		if _, err := q.Send(fmt.Appendf(nil, "message of queue %d", i)); err != nil {
			return err
		}
		if err := d.interrupted(); err != nil && i%1000 == 0 {
			return err
		}
	}
	created := time.Since(t0)
	rss1, fds1, maps1, _ := processFigures()
	if err := s.Close(); err != nil {
		s = nil
		return err
	}
	t1 := time.Now()
	if s, err = queue.OpenStore(dir, queue.StoreOptions{}); err != nil {
		s = nil
		return err
	}
	reopened := time.Since(t1)
	t2 := time.Now()
	for i, name := range names {
		q, err := s.Queue(name)
		if err != nil {
			return err
		}
		m, ok, err := q.TryReceive()
		switch {
		case err != nil:
			return fmt.Errorf("queue %s: %w", name, err)
		case !ok:
			return fmt.Errorf("queue %s: its message is not there after the reopen", name)
		case string(m.Body) != fmt.Sprintf("message of queue %d", i):
			return fmt.Errorf("queue %s: got %q", name, m.Body)
		}
		if err := q.Delete(m.Offset); err != nil {
			return err
		}
	}
	drained := time.Since(t2)
	st := s.Stats()
	if st.Messages != 0 || st.Queues != storeDemoQueues {
		return fmt.Errorf("store not empty after the drain: %d queues, %d messages", st.Queues, st.Messages)
	}
	held := "not measured on this platform (no /proc)"
	if known {
		held = fmt.Sprintf("resident memory +%s, descriptors %d -> %d, mappings %d -> %d",
			formatBytes(max(rss1-rss0, 0)), fds0, fds1, maps0, maps1)
	}
	d.summary = append(d.summary,
		fmt.Sprintf("%-7s %d queues created in one store, one message sent to each, in %s (%s per queue)",
			"store", storeDemoQueues, fmtDur(created), fmtDur(created/storeDemoQueues)),
		fmt.Sprintf("%-7s with every queue open: %s", "store", held),
		fmt.Sprintf("%-7s reopened in %s; %d messages received and deleted in %s; store empty",
			"store", fmtDur(reopened), storeDemoQueues, fmtDur(drained)))
	return nil
}
