package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/pagelog/pagelog/engine"
)

// A Store holds any number of queues in one directory: one lock, five
// logs shared by every queue, and a few bytes of memory and disk per idle
// queue. A *Queue from Store.Queue has the whole Queue API and its
// promises; what differs is where its records live (see the package
// documentation, Stores, and FORMAT.md).
//
// The descriptors, mappings and goroutines of a store do not grow with
// its queues: its logs have theirs, each queue has none of its own (no
// timer or goroutine while it is idle: the store's one checkpoint loop
// writes the heads of the queues that changed). Sends to many queues
// share the message log's group commit: under SyncAlways, concurrent
// sends to different queues wait for one fsync.
type Store struct {
	dir   string
	opts  StoreOptions
	qopts Options // the queues' options (defaults applied)

	msgs, dels, recvs *sharedLog
	names, heads      *engine.Log

	mu      sync.Mutex
	byName  map[string]*storeQueue
	byID    map[uint32]*storeQueue
	nextID  uint32
	closed  bool
	closing atomic.Bool

	paused    atomic.Int32 // PauseDrops in force
	ckMu      sync.Mutex   // serializes the store's checkpoints
	headBytes int64        // bytes of live head records (heads log compaction)
	ckErr     atomic.Pointer[error]

	recovery StoreRecovery
	tickMu   sync.Mutex // guards timer, stopped and the early fields
	timer    Timer
	stopped  bool

	// A checkpoint brought forward (see checkpointSoon): the queues
	// that asked for it, whether one is armed or running, its timer.
	early      []*storeQueue
	earlyArmed bool
	earlyTimer Timer
	// earlyRuns counts the early checkpoints armed or running: each is
	// added under tickMu while not stopped, so Close's wait follows
	// every Add.
	earlyRuns sync.WaitGroup
	lastCk    atomic.Int64 // the clock's UnixNano at the last checkpoint's start
}

// StoreOptions configure a Store. Zero fields mean the defaults.
type StoreOptions struct {
	// Log configures the store's message log, shared by every queue:
	// its segment size, sync policy (which the store's other logs
	// follow), file modes, largest message. ReadOnly and FirstOffset are
	// refused.
	Log engine.Options

	// The defaults of every queue of the store (see Options; a queue may
	// set its own with Store.QueueWith).
	Visibility         time.Duration
	CheckpointInterval time.Duration // how often the store writes the heads that moved; default 1 s
	Clock              Clock
	DefaultDelay       time.Duration
	DedupWindow        time.Duration
	MaxReceives        int // > 0: a queue's dead letters go to the queue NAME.dead of the same store
	MaxHeldSegments    int
}

// QueueOptions are the settings of one queue of a store that may differ
// from the store's (zero fields: the store's). They apply when
// Store.QueueWith opens the queue; a queue already open keeps its own.
type QueueOptions struct {
	Visibility   time.Duration
	DefaultDelay time.Duration
	DedupWindow  time.Duration
	MaxReceives  int
}

// StoreRecovery reports what OpenStore found and did.
type StoreRecovery struct {
	Queues int // queues found (names registered and not deleted)
	// Orphans counts records of the shared logs whose queue is unknown
	// (a name record lost with the unsynced tail of the names log) or
	// was deleted: they belong to no queue and are never handed out.
	Orphans uint64
	// Damaged lists the damaged records of the store's logs, stepped
	// over. A damaged message record is lost to its queue, which reports
	// it at its open (Recovery.Lost); a damaged head record makes its
	// queue start from the head before it (it may redeliver deleted
	// messages, never lose one). A queue id with records or a head but
	// no name in the names log (which is never trimmed) is listed too:
	// its name record was lost, and the queue with it.
	Damaged  []string
	Messages engine.Recovery // the shared message log's Open
}

// StoreStats is a snapshot of a store's totals and its deepest queues.
type StoreStats struct {
	Queues   int    // queues in the store
	Open     int    // of them, open in this process (handed out by Queue)
	Messages uint64 // messages not deleted, over every queue (see QueueDepth)
	InFlight int    // handed out and not deleted, over the open queues
	// Deepest are the queues with the most messages, deepest first, at
	// most StoreStatsDeepest of them.
	Deepest []QueueDepth
	Log     engine.LogStats // the shared message log
	// CheckpointError is the last store checkpoint's failure (nil when
	// it worked).
	CheckpointError error
}

// QueueDepth is one queue's size in StoreStats. A queue open in this
// process counts exactly; one not opened since the store opened counts
// every message from its checkpointed head on, deleted ones above the
// head included (an upper bound).
type QueueDepth struct {
	Name     string
	Messages uint64
	InFlight int
}

// StoreStatsDeepest is how many queues StoreStats.Deepest lists.
const StoreStatsDeepest = 10

// MaxQueueNameBytes is the longest queue name.
const MaxQueueNameBytes = 255

// ErrBadQueueName is returned for a queue name that is empty, longer than
// MaxQueueNameBytes, not UTF-8, or holds '/' or NUL.
var ErrBadQueueName = errors.New("pagelog: bad queue name")

// ErrNoQueue is returned by DeleteQueue for a name the store does not hold.
var ErrNoQueue = errors.New("pagelog: no such queue")

// The store's directory: messages/, deletes/ and receives/ are the shared
// logs, names/ the queue registry, heads/ the queues' head checkpoints.
const (
	storeMessagesDir = "messages"
	storeDeletesDir  = "deletes"
	storeReceivesDir = "receives"
	storeNamesDir    = "names"
	storeHeadsDir    = "heads"
	// deadSuffix names a queue's dead-letter queue in its store.
	deadSuffix = ".dead"
)

// storeQueue is what a store knows of one of its queues, open or not.
type storeQueue struct {
	name              string
	id                uint32
	msgs, dels, recvs *storeView
	head              headState // the last head written (or read at open)
	hasHead           bool
	dirty             atomic.Bool // a view appended since the last checkpoint
	keep              bool        // checkpoint at every tick (a drop held back)

	openMu sync.Mutex // serializes the queue's open
	q      *Queue     // nil until opened
}

// queueOf is a queue of the store and its Queue (nil when not opened),
// read together under Store.mu, where Store.queue sets it.
type queueOf struct {
	sq *storeQueue
	q  *Queue
}

// storeRef ties a Queue to its store.
type storeRef struct {
	s  *Store
	sq *storeQueue
}

// CheckQueueName returns nil for a valid queue name, an error wrapping
// ErrBadQueueName otherwise.
func CheckQueueName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadQueueName)
	case len(name) > MaxQueueNameBytes:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrBadQueueName, len(name), MaxQueueNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not UTF-8", ErrBadQueueName, name)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return fmt.Errorf("%w: %q holds '/' or NUL", ErrBadQueueName, name)
		}
	}
	return nil
}

func (o StoreOptions) queueOptions() (Options, error) {
	if o.Log.FirstOffset != 0 {
		return Options{}, fmt.Errorf("%w: a store's log starts at 0 (FirstOffset %d)", engine.ErrBadOptions, o.Log.FirstOffset)
	}
	return Options{
		Log:                o.Log,
		Visibility:         o.Visibility,
		CheckpointInterval: o.CheckpointInterval,
		Clock:              o.Clock,
		DefaultDelay:       o.DefaultDelay,
		DedupWindow:        o.DedupWindow,
		MaxReceives:        o.MaxReceives,
		MaxHeldSegments:    o.MaxHeldSegments,
	}.withDefaults("")
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Recovery returns the report of what OpenStore found and did.
func (s *Store) Recovery() StoreRecovery { return s.recovery }

// Stats returns the store's totals and its deepest queues.
func (s *Store) Stats() StoreStats {
	type item struct {
		sq *storeQueue
		q  *Queue
	}
	s.mu.Lock()
	qs := make([]queueOf, 0, len(s.byID))
	for _, sq := range s.byID {
		qs = append(qs, queueOf{sq, sq.q}) // sq.q is set under s.mu
	}
	s.mu.Unlock()
	st := StoreStats{Queues: len(qs), Log: s.msgs.l.Stats()}
	if p := s.ckErr.Load(); p != nil {
		st.CheckpointError = *p
	}
	depths := make([]QueueDepth, 0, len(qs))
	for _, e := range qs {
		sq := e.sq
		d := QueueDepth{Name: sq.name}
		if q := e.q; q != nil && !q.closed.Load() {
			st.Open++
			d.Messages, d.InFlight = q.depth()
		} else {
			head, _ := s.headOf(sq)
			d.Messages = sq.msgs.Next() - min(sq.msgs.Next(), max(head.head, sq.msgs.First()))
		}
		st.Messages += d.Messages
		st.InFlight += d.InFlight
		depths = append(depths, d)
	}
	sort.Slice(depths, func(i, j int) bool {
		if depths[i].Messages != depths[j].Messages {
			return depths[i].Messages > depths[j].Messages
		}
		return depths[i].Name < depths[j].Name
	})
	st.Deepest = depths[:min(len(depths), StoreStatsDeepest)]
	return st
}

// Close closes every Queue the store handed out (their blocked receivers
// return ErrClosed), writes their heads and closes the store's logs.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return engine.ErrClosed
	}
	s.closed = true
	s.closing.Store(true)
	var open []*Queue
	for _, sq := range s.byID {
		if sq.q != nil && sq.q.owner == nil {
			open = append(open, sq.q)
		}
	}
	s.mu.Unlock()
	s.tickMu.Lock()
	s.stopped = true
	s.timer.Stop()
	if s.earlyTimer != nil && s.earlyTimer.Stop() {
		s.earlyRuns.Done() // its run will not come
	}
	s.early = nil
	s.tickMu.Unlock()
	s.earlyRuns.Wait() // one fired or running sees stopped, or ends first
	var errs []error
	for _, q := range open {
		if err := q.close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.checkpoint())
	for _, sh := range []*sharedLog{s.msgs, s.dels, s.recvs} {
		errs = append(errs, sh.l.Close())
	}
	errs = append(errs, s.heads.Close(), s.names.Close())
	return errors.Join(errs...)
}

// IsStore reports whether dir holds a store.
func IsStore(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, storeNamesDir, "log.meta"))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, err
}
