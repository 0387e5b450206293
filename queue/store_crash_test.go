package queue

// Crash tests of a store: workers over a thousand queues send, receive,
// delete, create queues and delete queues while the process is killed
// with SIGKILL (under SyncNone and SyncAlways) or the power fails (under
// SyncAlways); what the reopened store holds is checked against what was
// acknowledged.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

var storeCrashRounds = flag.Int("queue.storecrash", 5, "rounds of TestStoreKill9 (per sync policy) and TestStorePowerLoss (-short: 2)")

func storeCrashRoundCount() int {
	if testing.Short() {
		return min(*storeCrashRounds, 2)
	}
	return *storeCrashRounds
}

// The store workload's queues and workers: each worker owns the queues
// whose index is its number modulo storeCrashWorkers, so that the events
// of one queue come in the order they happened.
const (
	storeCrashQueues  = 1000
	storeCrashWorkers = 8
)

func storeCrashName(i int) string { return fmt.Sprintf("q%04d", i) }

// Events of the store workload:
//
//	c name         Store.Queue is about to create the queue
//	C name         it returned
//	s name 0 seq   Send (or SendBatch) of body seq is about to be called
//	S name off seq it returned offset off
//	d name off seq Delete (or DeleteBatch) of off is about to be called
//	D name off seq it returned nil
//	x name         DeleteQueue is about to be called
//	X name         it returned nil
type scEvent struct {
	kind     byte
	name     string
	off, seq uint64
}

func (e scEvent) String() string { return fmt.Sprintf("%c %s %d %d", e.kind, e.name, e.off, e.seq) }

func parseSCEvent(line string) (scEvent, bool) {
	var e scEvent
	_, err := fmt.Sscanf(line, "%c %s %d %d", &e.kind, &e.name, &e.off, &e.seq)
	return e, err == nil && strings.IndexByte("cCsSdDxX", e.kind) >= 0
}

// storeCrashBody is message seq of queue name: the queue's name, the
// sequence number, and padding that makes a torn body show.
func storeCrashBody(name string, seq uint64) []byte {
	return fmt.Appendf(nil, "%s/%d/%s", name, seq, strings.Repeat("b", int(seq%61)))
}

// parseStoreCrashBody parses a body made by storeCrashBody.
func parseStoreCrashBody(b []byte) (name string, seq uint64, ok bool) {
	f := strings.SplitN(string(b), "/", 3)
	if len(f) != 3 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || string(storeCrashBody(f[0], seq)) != string(b) {
		return "", 0, false
	}
	return f[0], seq, true
}

// storeCrashOptions are the workload's store options: small segments so
// that checkpoints drop and recycle them, short visibilities so that
// abandoned messages come back, checkpoints every few milliseconds.
func storeCrashOptions(policy engine.SyncPolicy) StoreOptions {
	return StoreOptions{
		Log:                engine.Options{SegmentBytes: 16 << 10, Sync: policy},
		Visibility:         20 * time.Millisecond,
		CheckpointInterval: 5 * time.Millisecond,
	}
}

// storeWorkload runs storeCrashWorkers workers on s until stop is closed,
// numbering bodies from seq on and calling emit for each event (from many
// goroutines). Each worker creates its queues (some of them not at once),
// sends single messages and batches, receives and deletes (one by one or
// in batches) or abandons what it received, and now and then deletes a
// queue. A worker that finds the store broken (an error before stop) or a
// message in the wrong queue calls fail. It returns a function that waits
// for the workers to stop.
func storeWorkload(s *Store, seq *atomic.Uint64, stop <-chan struct{}, emit func(scEvent), fail func(string)) (wait func()) {
	var wg sync.WaitGroup
	stopped, check := workloadChecks(stop, fail)
	exists := map[string]bool{}
	for _, name := range s.Names() {
		exists[name] = true
	}
	for w := range storeCrashWorkers {
		var own []string
		for i := w; i < storeCrashQueues; i += storeCrashWorkers {
			own = append(own, storeCrashName(i))
		}
		have := map[string]bool{}
		for _, name := range own {
			have[name] = exists[name]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), seq.Load()))
			open := map[string]*Queue{}
			for !stopped() {
				name := own[rng.IntN(len(own))]
				if !have[name] {
					if rng.IntN(3) != 0 {
						continue // some names stay deleted for a while
					}
					emit(scEvent{kind: 'c', name: name})
					q, err := s.Queue(name)
					if !check("Queue "+name, err) {
						return
					}
					emit(scEvent{kind: 'C', name: name})
					have[name], open[name] = true, q
					continue
				}
				q := open[name]
				if q == nil {
					var err error
					if q, err = s.Queue(name); !check("Queue "+name, err) {
						return
					}
					open[name] = q
				}
				switch p := rng.IntN(100); {
				case p < 40:
					n := seq.Add(1)
					emit(scEvent{kind: 's', name: name, seq: n})
					off, err := q.Send(storeCrashBody(name, n))
					if !check("Send to "+name, err) {
						return
					}
					emit(scEvent{'S', name, off, n})
				case p < 48:
					var bodies [][]byte
					var seqs []uint64
					for range 2 + rng.IntN(3) {
						n := seq.Add(1)
						emit(scEvent{kind: 's', name: name, seq: n})
						bodies, seqs = append(bodies, storeCrashBody(name, n)), append(seqs, n)
					}
					first, err := q.SendBatch(bodies)
					if !check("SendBatch to "+name, err) {
						return
					}
					for k, n := range seqs {
						emit(scEvent{'S', name, first + uint64(k), n})
					}
				case p < 98:
					var got []scEvent
					for range 1 + rng.IntN(3) {
						m, ok, err := q.TryReceive()
						if !ok {
							check("TryReceive from "+name, err)
							break
						}
						if !check("TryReceive from "+name, err) {
							return
						}
						bn, n, good := parseStoreCrashBody(m.Body)
						if !good || bn != name {
							fail(fmt.Sprintf("queue %s offset %d handed out body %q", name, m.Offset, m.Body))
							return
						}
						got = append(got, scEvent{'d', name, m.Offset, n})
					}
					switch r := rng.IntN(10); {
					case r < 6:
						for _, e := range got {
							emit(e)
							if !check("Delete from "+name, q.Delete(e.off)) {
								return
							}
							e.kind = 'D'
							emit(e)
						}
					case r < 8 && len(got) > 0:
						offs := make([]uint64, len(got))
						for k, e := range got {
							emit(e)
							offs[k] = e.off
						}
						if !check("DeleteBatch from "+name, q.DeleteBatch(offs)) {
							return
						}
						for _, e := range got {
							e.kind = 'D'
							emit(e)
						}
					}
					// Otherwise abandoned: they come back after the
					// visibility timeout.
				default:
					emit(scEvent{kind: 'x', name: name})
					if !check("DeleteQueue "+name, s.DeleteQueue(name)) {
						return
					}
					emit(scEvent{kind: 'X', name: name})
					have[name] = false
					delete(open, name)
				}
			}
		}()
	}
	return wg.Wait
}

// scQueue is what the check knows of one queue name.
type scQueue struct {
	exists bool              // created (acknowledged) and not deleted since
	gen    int               // bumped at each acknowledged DeleteQueue and each check
	msgs   map[uint64]uint64 // seq -> offset of the messages the queue must hold
	maxOff int64             // the highest offset known taken in this queue (-1: none)
	// A DeleteQueue or a creation was called and not acknowledged: the
	// queue may or may not be there.
	xPending, cPending bool
	deleted            bool // a DeleteQueue acknowledged in this round
}

// scModel is what the store holds, as far as the acknowledgements tell.
type scModel struct {
	qs      map[string]*scQueue
	seqOf   map[uint64]scSeq // every body ever sent: its queue and generation
	nextSeq uint64
}

type scSeq struct {
	name string
	gen  int
}

func newSCModel() *scModel {
	m := &scModel{qs: map[string]*scQueue{}, seqOf: map[uint64]scSeq{}, nextSeq: 1}
	for i := range storeCrashQueues {
		m.qs[storeCrashName(i)] = &scQueue{msgs: map[uint64]uint64{}, maxOff: -1}
	}
	return m
}

// scFigures are what one round's check saw.
type scFigures struct {
	events, sends, deletes, creates, queueDeletes int
	queues, checked, emptyChecked, damaged        int
}

// checkStoreCrash reopens the store in dir and checks it against the
// model and the round's events: the returns among events[:acked] were
// acknowledged before the crash, the calls among events were made before
// it (and may have reached the disk). It then makes the model what the
// store holds now (every message is received and none deleted: the next
// round gets them again) and returns the round's figures.
//
// The checks: every queue whose creation was acknowledged, and no
// DeleteQueue called after, is in Names(); a queue whose DeleteQueue was
// acknowledged, and no creation called after, is not, and a queue created
// again under its name starts empty; every acknowledged send of a queue
// not deleted since, and no Delete called for it, comes back from that
// queue at its offset; no message whose Delete returned comes back; no
// body comes out of a queue other than its own, nor out of a queue
// created again after its own was deleted; no body comes out twice; a
// send never takes an offset taken before in its queue. damaged tells
// whether damaged records of sends never acknowledged may show (a power
// failure).
func checkStoreCrash(t *testing.T, dir string, m *scModel, events []scEvent, acked int, damaged bool) scFigures {
	t.Helper()
	var fig scFigures
	fig.events = len(events)
	deleting, deletedSeq := map[uint64]bool{}, map[uint64]bool{}
	for k, e := range events {
		q := m.qs[e.name]
		if q == nil {
			t.Fatalf("event %v names a queue outside the workload", e)
		}
		ack := k < acked
		switch e.kind {
		case 'c':
			q.cPending = true
		case 'C':
			if ack {
				q.cPending, q.exists = false, true
				fig.creates++
			}
		case 'x':
			q.xPending = true
		case 'X':
			if ack {
				q.xPending, q.exists, q.deleted = false, false, true
				q.gen++
				q.msgs, q.maxOff = map[uint64]uint64{}, -1
				fig.queueDeletes++
			}
		case 's':
			m.seqOf[e.seq] = scSeq{e.name, q.gen}
			m.nextSeq = max(m.nextSeq, e.seq+1)
		case 'S':
			if !ack {
				continue
			}
			if int64(e.off) <= q.maxOff {
				t.Errorf("queue %s: send of body %d took offset %d, at or below %d taken before", e.name, e.seq, e.off, q.maxOff)
			}
			q.msgs[e.seq], q.maxOff = e.off, int64(e.off)
			fig.sends++
		case 'd':
			deleting[e.seq] = true
		case 'D':
			if ack {
				deletedSeq[e.seq] = true
				fig.deletes++
			}
		}
	}

	o := storeCrashOptions(engine.SyncNone) // the check's own writes need no sync
	o.Visibility = time.Hour                // nothing comes back while the check receives
	s, err := OpenStore(dir, o)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close after the check: %v", err)
		}
	}()
	if d := s.Recovery().Damaged; len(d) > 0 && !damaged {
		t.Errorf("damaged records after a kill: %q", d)
	}
	present := map[string]bool{}
	for _, name := range s.Names() {
		present[name] = true
		if m.qs[name] == nil {
			t.Errorf("queue %q is in the store: the workload never named it", name)
		}
	}
	fig.queues = len(present)
	got := map[string]map[uint64]uint64{} // name -> seq -> offset handed out
	seen := map[uint64]string{}
	for name := range present {
		mq := m.qs[name]
		if mq == nil {
			continue
		}
		q, err := s.Queue(name)
		if err != nil {
			t.Fatalf("Queue %s: %v", name, err)
		}
		got[name] = map[uint64]uint64{}
		for {
			msg, ok, err := q.TryReceive()
			if !ok {
				if err != nil {
					t.Fatalf("TryReceive from %s: %v", name, err)
				}
				break
			}
			if err != nil {
				if !damaged {
					t.Errorf("queue %s offset %d handed out damaged after a kill: %v", name, msg.Offset, err)
				}
				fig.damaged++
				continue
			}
			fig.checked++
			bn, n, good := parseStoreCrashBody(msg.Body)
			sq, sent := m.seqOf[n]
			switch {
			case !good || !sent:
				t.Errorf("queue %s offset %d: body %q was never sent", name, msg.Offset, msg.Body)
				continue
			case bn != name || sq.name != name:
				t.Errorf("queue %s offset %d: body %d of queue %s", name, msg.Offset, n, bn)
				continue
			case sq.gen != mq.gen:
				t.Errorf("queue %s offset %d: body %d was sent to a queue of the name deleted before", name, msg.Offset, n)
			case deletedSeq[n]:
				t.Errorf("queue %s offset %d: body %d is back; its Delete returned", name, msg.Offset, n)
			case seen[n] != "":
				t.Errorf("queue %s offset %d: body %d handed out twice", name, msg.Offset, n)
			}
			if off, ok := mq.msgs[n]; ok && off != msg.Offset {
				t.Errorf("queue %s: body %d handed out at offset %d, acknowledged at %d", name, n, msg.Offset, off)
			}
			seen[n] = name
			got[name][n] = msg.Offset
		}
	}
	var lost []string
	for i := range storeCrashQueues {
		name := storeCrashName(i)
		mq := m.qs[name]
		switch {
		case mq.xPending: // deleted or not
		case mq.exists && !present[name]:
			t.Errorf("queue %s: its creation was acknowledged, it is not in Names()", name)
		case !mq.exists && !mq.cPending && present[name]:
			t.Errorf("queue %s: its DeleteQueue was acknowledged, it is in Names()", name)
		}
		if mq.xPending || !mq.exists {
			continue
		}
		for n, off := range mq.msgs {
			if _, ok := got[name][n]; !ok && !deleting[n] {
				lost = append(lost, fmt.Sprintf("%s/%d@%d", name, n, off))
			}
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		t.Errorf("%d acknowledged sends no Delete was called for are lost: %v", len(lost), lost[:min(len(lost), 20)])
	}
	// A queue deleted and not created again holds nothing: created again
	// now (a new queue of the name), it is empty. Then deleted again.
	for i := range storeCrashQueues {
		name := storeCrashName(i)
		mq := m.qs[name]
		if !mq.deleted || present[name] || mq.cPending || mq.xPending || fig.emptyChecked == 50 {
			continue
		}
		q, err := s.Queue(name)
		if err != nil {
			t.Fatalf("Queue %s: %v", name, err)
		}
		if msg, ok, err := q.TryReceive(); ok || err != nil {
			t.Errorf("queue %s, deleted, created again: handed out %q at %d (%v)", name, msg.Body, msg.Offset, err)
		}
		if st := q.Stats(); st.Messages != 0 {
			t.Errorf("queue %s, deleted, created again: %d messages", name, st.Messages)
		}
		if err := s.DeleteQueue(name); err != nil {
			t.Fatalf("DeleteQueue %s: %v", name, err)
		}
		fig.emptyChecked++
	}
	// The model is now what the store holds.
	for name, mq := range m.qs {
		certain := !mq.xPending
		mq.exists, mq.xPending, mq.cPending, mq.deleted = present[name], false, false, false
		mq.gen++
		if !certain {
			mq.maxOff = -1 // the queue may be the one before the DeleteQueue or a new one
		}
		mq.msgs = got[name]
		if mq.msgs == nil {
			mq.msgs = map[uint64]uint64{}
		}
		for n, off := range mq.msgs {
			m.seqOf[n] = scSeq{name, mq.gen}
			mq.maxOff = max(mq.maxOff, int64(off))
		}
	}
	return fig
}

func (f scFigures) String() string {
	return fmt.Sprintf("%d events (%d sends, %d deletes, %d creations, %d queue deletes acknowledged); after: %d queues, %d messages checked, %d deleted queues checked empty, %d damaged",
		f.events, f.sends, f.deletes, f.creates, f.queueDeletes, f.queues, f.checked, f.emptyChecked, f.damaged)
}

// TestStoreKill9: a child process runs the store workload over a thousand
// queues and is killed with SIGKILL at a random moment (after a random
// number of acknowledgements), round after round on the same store, under
// SyncNone and under SyncAlways. The child prints each acknowledgement
// after its call returned; the reopened store holds every acknowledged
// send of a queue not deleted since in that queue, gives back no message
// whose Delete returned, and no message in a queue other than its own;
// every acknowledged creation not deleted since is in Names(), and a
// queue whose DeleteQueue returned is gone, and empty when created again.
func TestStoreKill9(t *testing.T) {
	if dir := os.Getenv("PAGELOG_STORE_KILL_DIR"); dir != "" {
		storeKill9Child(dir, os.Getenv("PAGELOG_STORE_KILL_SYNC"), os.Getenv("PAGELOG_STORE_KILL_SEQ"))
		return
	}
	for _, policy := range []string{"none", "always"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			m := newSCModel()
			for round := range storeCrashRoundCount() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(time.Now().UnixNano())))
				cmd, pipe, stderr := startChild(t, "TestStoreKill9", "PAGELOG_STORE_KILL_DIR="+dir,
					"PAGELOG_STORE_KILL_SYNC="+policy, fmt.Sprint("PAGELOG_STORE_KILL_SEQ=", m.nextSeq))
				var events []scEvent
				busy, copied := childLines(pipe, 300+rng.IntN(2500), func(line string) bool {
					e, ok := parseSCEvent(line)
					if ok {
						events = append(events, e)
					}
					return ok
				})
				select {
				case <-busy:
				case <-time.After(30 * time.Second):
				}
				killChild(t, cmd, copied, stderr)
				if len(events) < 300 {
					t.Fatalf("round %d: the child did too little (%d events)\nstderr: %s", round, len(events), stderr.String())
				}
				fig := checkStoreCrash(t, dir, m, events, len(events), false)
				t.Logf("round %d: %v", round, fig)
				if t.Failed() {
					return
				}
			}
		})
	}
}

// storeKill9Child is TestStoreKill9's child: it runs the workload on the
// store in dir, numbering bodies from seq, until it is killed.
func storeKill9Child(dir, policy, seq string) {
	p := engine.SyncNone
	if policy == "always" {
		p = engine.SyncAlways
	}
	var next atomic.Uint64
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "seq:", err)
		os.Exit(3)
	}
	next.Store(n - 1)
	s, err := OpenStore(dir, storeCrashOptions(p))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var mu sync.Mutex
	storeWorkload(s, &next, make(chan struct{}), func(e scEvent) {
		line := e.String() + "\n"
		mu.Lock()
		os.Stdout.WriteString(line) // one write per line: whole lines reach the pipe
		mu.Unlock()
	}, func(msg string) {
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(4)
	})
	select {}
}

// TestStorePowerLoss: the store workload runs over a thousand queues
// under SyncAlways and the power fails at a random moment (after a random
// number of acknowledgements), round after round, each round on the disk
// the failure before left. The disk is built from the syncs the store's
// logs really made, watched as TestQueuePowerLoss watches a queue's (see
// syncDisk): each file as its last fdatasync left it, torn sector by
// sector towards what it holds now; each directory as its last sync left
// it, or with the entries made since. A sync the store leaves out loses
// what it acknowledged. The checks are TestStoreKill9's, for what was
// acknowledged before the failure.
func TestStorePowerLoss(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newSCModel()
	var st syncDiskStats
	for round := range storeCrashRoundCount() {
		if dir = storePowerLossRound(t, round, dir, m, &st); t.Failed() {
			return
		}
	}
	t.Log(st)
	if !t.Failed() && st.SectorsOld == 0 {
		t.Errorf("no image kept an unsynced sector old: the disk never tore (%v)", st)
	}
}

// storePowerLossRound runs the workload on the store in dir until the
// power fails, checks the disk the failure left and returns its
// directory.
func storePowerLossRound(t *testing.T, round int, dir string, m *scModel, st *syncDiskStats) string {
	rng := rand.New(rand.NewPCG(uint64(round), uint64(time.Now().UnixNano())))
	sd := newSyncDiskOf(t, dir, storeDirs)
	sd.writeback() // the disk the round starts from is all there is
	s, err := OpenStore(dir, storeCrashOptions(engine.SyncAlways))
	if err != nil {
		t.Fatalf("round %d: open: %v", round, err)
	}
	var mu sync.Mutex
	var events []scEvent
	target := 300 + rng.IntN(1500)
	busy := make(chan struct{})
	emit := func(e scEvent) {
		mu.Lock()
		if events = append(events, e); len(events) == target {
			close(busy)
		}
		mu.Unlock()
	}
	var next atomic.Uint64
	next.Store(m.nextSeq - 1)
	stop := make(chan struct{})
	wait := storeWorkload(s, &next, stop, emit, func(msg string) { t.Error(msg) })
	stopped := false
	end := func() {
		if !stopped {
			stopped = true
			close(stop)
			if err := s.Close(); err != nil {
				t.Errorf("round %d: Close: %v", round, err)
			}
			wait()
		}
	}
	defer end() // the workers stop before the test's directories go, also on a failure
	select {
	case <-busy:
	case <-time.After(30 * time.Second):
		t.Fatalf("round %d: the workload did too little", round)
	}
	mu.Lock()
	acked := len(events)
	mu.Unlock()
	disk := t.TempDir()
	sd.crash()
	before := *st
	sd.build(t, rng, disk, st)
	mu.Lock()
	ended := len(events) // calls made before may be on the disk
	mu.Unlock()
	end()
	fig := checkStoreCrash(t, disk, m, events[:ended], acked, true)
	t.Logf("round %d: %d acknowledged before the failure; disk: %d files torn, %d entries lost, %d files never synced; %v",
		round, acked, st.FilesTorn-before.FilesTorn, st.entriesLost-before.entriesLost, st.Unsynced-before.Unsynced, fig)
	return disk
}
