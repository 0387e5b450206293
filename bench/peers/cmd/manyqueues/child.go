package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pagelog/pagelog/bench/peers/internal/payload"
)

// Phases a child runs.
const (
	phaseCreate = "create" // create, first message, spread send and receive, close, du
	phaseReopen = "reopen" // open the data again and touch every queue
)

// result is what one child measured, written as JSON on its standard output.
type result struct {
	System  string `json:"system"`
	Phase   string `json:"phase"`
	Queues  int    `json:"queues"`  // asked for
	Reached int    `json:"reached"` // queues created (create) or touched (reopen)
	Err     string `json:"error,omitempty"`

	NoFileSoft  uint64 `json:"nofile_soft"` // RLIMIT_NOFILE after raising the soft limit to the hard one
	NoFileHard  uint64 `json:"nofile_hard"`
	MaxMapCount int64  `json:"max_map_count"` // vm.max_map_count

	Base    usage `json:"base"`     // before the system is opened
	StartNs int64 `json:"start_ns"` // opening the system (a server, a database file) before any queue

	// create phase
	CreateNs    int64 `json:"create_ns,omitempty"` // creating the Reached queues with their first message
	Created     usage `json:"created"`             // then (or where it stopped)
	SendOps     int   `json:"send_ops,omitempty"`
	SendNs      int64 `json:"send_ns,omitempty"`
	RecvOps     int   `json:"recv_ops,omitempty"`
	RecvNs      int64 `json:"recv_ns,omitempty"`
	AfterSpread usage `json:"after_spread"`
	Messages    int64 `json:"messages"` // left after the spread receive
	CloseNs     int64 `json:"close_ns"`
	DiskBytes   int64 `json:"disk_bytes"` // du of the data directory after Close
	Files       int   `json:"files"`

	// reopen phase
	ReopenNs int64 `json:"reopen_ns,omitempty"` // open + touch every queue
	Reopened usage `json:"reopened"`
	Counted  int64 `json:"counted"` // messages the touches found
}

// runChild runs one phase of one system on dir and returns what it measured;
// a system that stops early (a limit, an error) gives a result whose Err
// says where and why, never a failure of the run.
func runChild(s *system, phase string, n int, dir string, cfg config) *result {
	r := &result{System: s.name, Phase: phase, Queues: n}
	r.NoFileSoft, r.NoFileHard = raiseNoFile(cfg.nofile)
	r.MaxMapCount = sysctlInt("/proc/sys/vm/max_map_count")
	p := newProbe()
	defer p.close()
	r.Base = p.usage()

	t0 := time.Now()
	inst, err := s.open(dir)
	r.StartNs = time.Since(t0).Nanoseconds()
	if err != nil {
		r.Err = fmt.Sprintf("open: %v", err)
		return r
	}
	var stop error
	switch phase {
	case phaseCreate:
		stop = createAll(r, s, inst, p, n, cfg)
	case phaseReopen:
		stop = reopenAll(r, inst, p, n)
	default:
		stop = fmt.Errorf("unknown phase %q", phase)
	}
	if phase == phaseReopen {
		// The child exits now: its data is thrown away, and the close was
		// timed by the create child (JetStream takes as long again here).
		if stop != nil {
			r.Err = stop.Error()
		}
		return r
	}
	t1 := time.Now()
	err = inst.close()
	r.CloseNs = time.Since(t1).Nanoseconds()
	if err := errors.Join(stop, err); err != nil {
		r.Err = err.Error()
	}
	if r.DiskBytes, r.Files, err = diskUsage(dir); err != nil && r.Err == "" {
		r.Err = fmt.Sprintf("du: %v", err)
	}
	return r
}

func createAll(r *result, s *system, inst instance, p *probe, n int, cfg config) error {
	first := payload.Make(firstBytes)
	t0 := time.Now()
	stopAt := func(i int, err error) error {
		r.CreateNs = time.Since(t0).Nanoseconds()
		r.Created = p.usage()
		return fmt.Errorf("stopped at queue %d of %d: %w", i, n, err)
	}
	for i := 0; i < n; i++ {
		if err := inst.create(i, first); err != nil {
			return stopAt(i, err)
		}
		r.Reached++
		if cfg.budget > 0 && i+1 < n && time.Since(t0) > cfg.budget {
			return stopAt(i+1, fmt.Errorf("making the queues took longer than the budget of %v (-budget)", cfg.budget))
		}
	}
	r.CreateNs = time.Since(t0).Nanoseconds()
	r.Created = p.usage()

	pending := make([]int64, n) // messages in each queue
	for i := range pending {
		pending[i] = 1
	}
	body := payload.Make(sendBytes)
	t0 = time.Now()
	for k := 0; ; k++ {
		if k%64 == 0 && time.Since(t0) >= cfg.spread {
			break
		}
		i := k % n
		if err := inst.send(i, body); err != nil {
			return fmt.Errorf("spread send %d, to queue %d: %w", k, i, err)
		}
		pending[i]++
		r.SendOps++
	}
	r.SendNs = time.Since(t0).Nanoseconds()

	if s.receive {
		if err := receiveSpread(r, inst, pending, cfg.spread); err != nil {
			return err
		}
	}
	for _, m := range pending {
		r.Messages += m
	}
	r.AfterSpread = p.usage()
	return nil
}

// receiveSpread receives and deletes one message from each queue in turn
// (skipping empty ones) until spread has passed or every queue is empty.
func receiveSpread(r *result, inst instance, pending []int64, spread time.Duration) error {
	var left int64
	for _, m := range pending {
		left += m
	}
	t0 := time.Now()
	for i := 0; left > 0; i = (i + 1) % len(pending) {
		if pending[i] == 0 {
			continue
		}
		if r.RecvOps%64 == 0 && time.Since(t0) >= spread {
			break
		}
		if err := inst.receive(i); err != nil {
			return fmt.Errorf("spread receive %d, from queue %d: %w", r.RecvOps, i, err)
		}
		pending[i]--
		left--
		r.RecvOps++
	}
	r.RecvNs = time.Since(t0).Nanoseconds()
	return nil
}

func reopenAll(r *result, inst instance, p *probe, n int) error {
	t0 := time.Now()
	for i := 0; i < n; i++ {
		m, err := inst.touch(i)
		if err != nil {
			r.Reopened = p.usage()
			return fmt.Errorf("stopped at queue %d of %d: %w", i, n, err)
		}
		r.Counted += m
		r.Reached++
	}
	// The reopen time counts the start of the system too: a restart pays both.
	r.ReopenNs = time.Since(t0).Nanoseconds() + r.StartNs
	r.Reopened = p.usage()
	return nil
}
