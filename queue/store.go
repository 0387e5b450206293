package queue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/regfile"
)

// A Store holds any number of queues in one directory: one lock, five
// logs shared by every queue, and a few bytes of memory and disk per idle
// queue. A *Queue from Store.Queue has the whole Queue API and its
// promises; what differs is where its records live (see the package
// documentation, docs/store.md, and FORMAT.md).
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
	// messages, never lose one).
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

// OpenStore opens (creating it if needed) the store in dir. It reads the
// names, the heads and the shared logs once and builds every queue's map
// of its records; queues are opened (their state rebuilt) when Queue
// first asks for them. A second OpenStore of dir, in this process or
// another, gets engine.ErrLocked.
//
// A directory that holds a log or a queue and no store is refused with
// ErrNotStore (nothing is made in it), and a store whose log directories
// are not directories (a symbolic link, a FIFO, a file) with
// engine.ErrNotRegular. Damage inside the logs is stepped over and
// reported (Recovery), or, where stepping over it could lose a message or
// hand it to another queue, an error.
func OpenStore(dir string, o StoreOptions) (*Store, error) {
	if err := engine.Supported(); err != nil {
		return nil, err
	}
	qo, err := o.queueOptions()
	if err != nil {
		return nil, err
	}
	dirMode := o.Log.DirMode
	if dirMode == 0 {
		dirMode = 0o700
	}
	if err := checkStoreDir(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("pagelog: create %s: %w", dir, err)
	}
	s := &Store{
		dir: dir, opts: o, qopts: qo,
		byName: map[string]*storeQueue{}, byID: map[uint32]*storeQueue{},
		nextID: 1,
	}
	if err := s.openLogs(); err != nil {
		s.closeLogs()
		return nil, err
	}
	if err := s.load(); err != nil {
		s.closeLogs()
		return nil, err
	}
	// Under tickMu: a tick due before AfterFunc returns sets the next
	// timer, under tickMu, and must find this one set.
	s.tickMu.Lock()
	s.timer = s.qopts.Clock.AfterFunc(s.qopts.CheckpointInterval, s.tick)
	s.tickMu.Unlock()
	return s, nil
}

// checkStoreDir refuses a directory that is not a store and holds a log
// or a queue (their files would be taken for the store's), and a store
// whose log directories are not directories: a symbolic link in place of
// one would have the store write its files wherever it points.
func checkStoreDir(dir string) error {
	if ok, err := IsStore(dir); err != nil {
		return err
	} else if !ok {
		isLog, err := engine.IsLog(dir)
		if err != nil {
			return err
		}
		_, herr := os.Lstat(filepath.Join(dir, headName))
		if isLog || herr == nil {
			return fmt.Errorf("%w: %s holds a log or a queue, and a store is made only in a new or empty directory (or one holding a store)", ErrNotStore, dir)
		}
	}
	for _, sub := range storeLogDirs {
		p := filepath.Join(dir, sub)
		if st, err := os.Lstat(p); err == nil && !st.IsDir() {
			return fmt.Errorf("pagelog: store %s: %w", dir, &regfile.TypeError{Path: p, Is: regfile.Kind(st.Mode()), Want: "a directory (the store's " + sub + " log)"})
		}
	}
	return nil
}

// storeLogDirs are the directories of a store's logs.
var storeLogDirs = []string{storeNamesDir, storeHeadsDir, storeMessagesDir, storeDeletesDir, storeReceivesDir}

// sideOptions are the options of the store's small logs.
func (s *Store) sideOptions(segBytes int64) engine.Options {
	lo := s.opts.Log
	d := engine.Options{
		SegmentBytes: segBytes,
		Sync:         lo.Sync,
		SyncInterval: lo.SyncInterval,
		FileMode:     lo.FileMode,
		DirMode:      lo.DirMode,
	}
	if d.Sync == engine.SyncAlways {
		d.Sync = engine.SyncNone // waited for by the writer (see sharedLog)
	}
	return d
}

func (s *Store) openLogs() error {
	var err error
	// names/ first: its lock is the store's.
	if s.names, err = engine.Open(filepath.Join(s.dir, storeNamesDir), s.sideOptions(1<<20)); err != nil {
		return err
	}
	if s.heads, err = engine.Open(filepath.Join(s.dir, storeHeadsDir), s.sideOptions(headsSegmentBytes)); err != nil {
		return err
	}
	wait := s.opts.Log.Sync == engine.SyncAlways
	lo := s.opts.Log
	lo.RetireMappings = true
	if lo.RecycleSegments == 0 {
		lo.RecycleSegments = recycledSegments
	}
	if wait {
		lo.Sync = engine.SyncNone
	}
	// The message log's appends wait for their sync under SyncAlways, as
	// a queue's own log does; the queue waits for its delete and
	// receive-count records itself, outside its lock (waitDelete), as
	// it does on its own side logs.
	open := func(sub string, o engine.Options, wait bool) (*sharedLog, error) {
		l, err := engine.Open(filepath.Join(s.dir, sub), o)
		if err != nil {
			return nil, err
		}
		return &sharedLog{l: l, wait: wait}, nil
	}
	if s.msgs, err = open(storeMessagesDir, lo, wait); err != nil {
		return err
	}
	side := min(deleteSegmentBytes, max(s.msgs.l.SegmentBytes()/4, 4<<10))
	if s.dels, err = open(storeDeletesDir, s.sideOptions(side), false); err != nil {
		return err
	}
	s.recvs, err = open(storeReceivesDir, s.sideOptions(side), false)
	return err
}

func (s *Store) closeLogs() {
	for _, sh := range []*sharedLog{s.recvs, s.dels, s.msgs} {
		if sh != nil {
			_ = sh.l.Close()
		}
	}
	for _, l := range []*engine.Log{s.heads, s.names} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// The names log: one record per creation (op 1) or deletion (op 2) of a
// queue: op (1 byte), queue id (4 bytes, big-endian), then for a creation
// the name.
const (
	nameCreate = 1
	nameDelete = 2
)

func encodeName(op byte, id uint32, name string) []byte {
	b := make([]byte, 5+len(name))
	b[0] = op
	binary.BigEndian.PutUint32(b[1:], id)
	copy(b[5:], name)
	return b
}

// decodeName decodes a record of the names log: op, queue id and, for a
// creation, the queue's name. A record of another size or op, or a
// creation whose name is not a queue's (nor a dead-letter queue's), is an
// error wrapping engine.ErrCorrupt.
func decodeName(b []byte) (op byte, id uint32, name string, err error) {
	if len(b) < 5 {
		return 0, 0, "", fmt.Errorf("%w: names record of %d bytes", engine.ErrCorrupt, len(b))
	}
	op, id = b[0], binary.BigEndian.Uint32(b[1:])
	switch op {
	case nameCreate:
		name = string(b[5:])
		if CheckQueueName(name) != nil && CheckQueueName(trimDead(name)) != nil {
			return 0, 0, "", fmt.Errorf("%w: names record creates queue %d as %q", engine.ErrCorrupt, id, name)
		}
	case nameDelete:
		if len(b) != 5 {
			return 0, 0, "", fmt.Errorf("%w: names record deleting queue %d has %d bytes", engine.ErrCorrupt, id, len(b))
		}
	default:
		return 0, 0, "", fmt.Errorf("%w: names record has op %d", engine.ErrCorrupt, op)
	}
	return op, id, name, nil
}

// decodeHeadRecord decodes a record of the heads log: a queue id and its
// head.
func decodeHeadRecord(b []byte) (uint32, headState, error) {
	if len(b) < 4 {
		return 0, headState{}, fmt.Errorf("%w: heads record of %d bytes", engine.ErrCorrupt, len(b))
	}
	h, err := decodeHead(b[4:])
	if err != nil {
		return 0, headState{}, err
	}
	return binary.BigEndian.Uint32(b), h, nil
}

// load reads the store's logs and builds its queues' maps.
func (s *Store) load() error {
	rec := &s.recovery
	rec.Messages = s.msgs.l.Recovery()
	maxID := uint32(0)
	damaged := func(what string, err error) {
		if len(rec.Damaged) < 100 {
			rec.Damaged = append(rec.Damaged, fmt.Sprintf("%s: %v", what, err))
		}
	}
	deleted := map[uint32]bool{}
	created := map[uint32]bool{} // ids given a name: an id is never given twice
	for r, err := range s.names.Records(s.names.First()) {
		if err != nil {
			if !errors.Is(err, engine.ErrTrimmed) {
				damaged("names log", err)
			}
			continue
		}
		op, id, name, err := decodeName(r.Body)
		if err != nil {
			damaged("names log", fmt.Errorf("record %d: %w", r.Offset, err))
			continue
		}
		maxID = max(maxID, id)
		switch op {
		case nameCreate:
			if deleted[id] {
				damaged("names log", fmt.Errorf("%w: record %d names queue %d %q, deleted before", engine.ErrCorrupt, r.Offset, id, name))
				continue
			}
			if created[id] {
				// The records of the id are its first name's: a second
				// name would get them.
				damaged("names log", fmt.Errorf("%w: record %d names queue %d %q, created before", engine.ErrCorrupt, r.Offset, id, name))
				continue
			}
			created[id] = true
			if old := s.byName[name]; old != nil {
				delete(s.byID, old.id) // a later creation of the name wins
			}
			s.addQueue(name, id)
		case nameDelete:
			deleted[id] = true
			sq := s.byID[id]
			if sq == nil {
				continue
			}
			delete(s.byID, id)
			delete(s.byName, sq.name)
			// Its dead-letter queue goes with it: DeleteQueue writes that
			// delete record second, and a crash between would leave the
			// dead letters to a queue created again under the name.
			if d := s.byName[sq.name+deadSuffix]; d != nil && trimDead(sq.name) == sq.name {
				deleted[d.id] = true
				delete(s.byID, d.id)
				delete(s.byName, d.name)
			}
		}
	}
	for r, err := range s.heads.Records(s.heads.First()) {
		if err != nil {
			if !errors.Is(err, engine.ErrTrimmed) {
				damaged("heads log", err)
			}
			continue
		}
		id, h, err := decodeHeadRecord(r.Body)
		if err != nil {
			damaged("heads log", fmt.Errorf("record %d: %w", r.Offset, err))
			continue
		}
		// An id with a head was given out, even if its create is lost:
		// a queue created later must not take it (and its head).
		maxID = max(maxID, id)
		if sq := s.byID[id]; sq != nil {
			if !sq.hasHead {
				s.headBytes += int64(len(r.Body))
			}
			sq.head, sq.hasHead = h, true
		}
	}
	for _, sh := range []struct {
		log  *sharedLog
		view func(*storeQueue) *storeView
		what string
	}{
		{s.msgs, func(sq *storeQueue) *storeView { return sq.msgs }, "message log"},
		{s.dels, func(sq *storeQueue) *storeView { return sq.dels }, "delete log"},
		{s.recvs, func(sq *storeQueue) *storeView { return sq.recvs }, "receive-count log"},
	} {
		l := sh.log.l
		for r, err := range l.RecordsWithAttrs(l.First()) {
			if err != nil {
				if !errors.Is(err, engine.ErrTrimmed) {
					damaged(sh.what, err)
				}
				continue
			}
			a, err := r.Attrs()
			if err != nil || !a.HasQueue {
				damaged(sh.what, fmt.Errorf("%w: record %d has no queue", engine.ErrCorrupt, r.Offset))
				continue
			}
			maxID = max(maxID, a.Queue)
			sq := s.byID[a.Queue]
			if sq == nil {
				rec.Orphans++
				continue
			}
			if !sh.view(sq).push(a.QueueOffset, r.Offset) {
				damaged(sh.what, fmt.Errorf("%w: record %d has offset %d of queue %q, at or below one before it or far past it", engine.ErrCorrupt, r.Offset, a.QueueOffset, sq.name))
			}
		}
	}
	if maxID == ^uint32(0) {
		return fmt.Errorf("%w: the store's queue ids are used up", engine.ErrFull)
	}
	s.nextID = maxID + 1
	if maxID == 0 {
		s.nextID = firstStoreID()
	}
	rec.Queues = len(s.byName)
	return nil
}

// firstStoreID is the first queue id of a store whose logs name none: a
// random one in [1, 2^31], so that the ids of two stores seldom meet. A
// names log (or a segment of one) from another store then names ids that
// no record of this store's logs holds, and its queues never get this
// store's messages (they are counted as orphans); the 2^31 ids above it
// are the store's to give out.
func firstStoreID() uint32 { return 1 + rand.Uint32N(1<<31) }

// trimDead strips the dead-letter suffix (a dead-letter queue's name may
// pass MaxQueueNameBytes by it).
func trimDead(name string) string {
	if len(name) > len(deadSuffix) && name[len(name)-len(deadSuffix):] == deadSuffix {
		return name[:len(name)-len(deadSuffix)]
	}
	return name
}

func (s *Store) addQueue(name string, id uint32) *storeQueue {
	sq := &storeQueue{name: name, id: id}
	sq.msgs = newStoreView(s.msgs, id, &sq.dirty)
	sq.dels = newStoreView(s.dels, id, &sq.dirty)
	sq.recvs = newStoreView(s.recvs, id, &sq.dirty)
	s.byName[name] = sq
	s.byID[id] = sq
	return sq
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Recovery returns the report of what OpenStore found and did.
func (s *Store) Recovery() StoreRecovery { return s.recovery }

// Queue returns the queue name, opening it if this store has not, and
// creating it (empty) if the store has no queue of that name. Every call
// for one name returns the same *Queue until it is closed. The name is
// 1-255 bytes of UTF-8 without '/' or NUL (ErrBadQueueName otherwise).
func (s *Store) Queue(name string) (*Queue, error) {
	return s.QueueWith(name, QueueOptions{})
}

// QueueWith is Queue with settings of the queue's own, used if this call
// opens it.
func (s *Store) QueueWith(name string, o QueueOptions) (*Queue, error) {
	if err := CheckQueueName(name); err != nil {
		return nil, err
	}
	return s.queue(name, o, nil)
}

func (s *Store) queue(name string, o QueueOptions, owner *Queue) (*Queue, error) {
	sq, err := s.lookup(name, true)
	if err != nil {
		return nil, err
	}
	return s.queueFound(sq, o, owner)
}

// queueFound returns the Queue of sq, opening it if needed; a queue
// deleted since it was looked up gets an error wrapping engine.ErrClosed.
func (s *Store) queueFound(sq *storeQueue, o QueueOptions, owner *Queue) (*Queue, error) {
	name := sq.name
	sq.openMu.Lock()
	defer sq.openMu.Unlock()
	s.mu.Lock()
	q, gone, closed := sq.q, s.byID[sq.id] != sq, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("pagelog: store %s: %w", s.dir, engine.ErrClosed)
	case gone:
		return nil, fmt.Errorf("pagelog: queue %q was deleted while it opened: %w", name, engine.ErrClosed)
	case q != nil && !q.closed.Load():
		return q, nil
	}
	q, err := s.openQueue(sq, o, owner)
	if err != nil {
		return nil, fmt.Errorf("pagelog: queue %q of store %s: %w", name, s.dir, err)
	}
	s.mu.Lock()
	if s.closed {
		// Close ran while this opened, and closes only the queues it
		// found: this one is closed here, its receivers woken.
		s.mu.Unlock()
		_ = q.close()
		return nil, fmt.Errorf("pagelog: store %s: %w", s.dir, engine.ErrClosed)
	}
	sq.q = q
	s.mu.Unlock()
	return q, nil
}

// lookup returns the queue named name, registering it when create is set
// and the store has none.
func (s *Store) lookup(name string, create bool) (*storeQueue, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("pagelog: store %s: %w", s.dir, engine.ErrClosed)
	}
	if sq := s.byName[name]; sq != nil || !create {
		s.mu.Unlock()
		if sq == nil {
			return nil, fmt.Errorf("%w: %q in store %s", ErrNoQueue, name, s.dir)
		}
		return sq, nil
	}
	if s.nextID == ^uint32(0) {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the store's queue ids are used up", engine.ErrFull)
	}
	id := s.nextID
	at, err := s.names.Append(encodeName(nameCreate, id, name))
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("pagelog: create queue %q: %w", name, err)
	}
	s.nextID++
	sq := s.addQueue(name, id)
	sq.openMu.Lock() // held until the creation is durable
	s.mu.Unlock()
	defer sq.openMu.Unlock()
	if s.opts.Log.Sync == engine.SyncAlways {
		if err := s.names.WaitDurable(context.Background(), at); err != nil {
			return nil, fmt.Errorf("pagelog: create queue %q: %w", name, err)
		}
	}
	return sq, nil
}

// openQueue builds the Queue of sq: its state from its head, its delete
// and receive-count records, and its dead-letter queue.
func (s *Store) openQueue(sq *storeQueue, o QueueOptions, owner *Queue) (*Queue, error) {
	opts := s.qopts
	if o.Visibility != 0 {
		opts.Visibility = o.Visibility
	}
	if o.DefaultDelay != 0 {
		opts.DefaultDelay = o.DefaultDelay
	}
	if o.DedupWindow != 0 {
		opts.DedupWindow = o.DedupWindow
	}
	if o.MaxReceives != 0 {
		opts.MaxReceives = o.MaxReceives
	}
	if owner != nil {
		opts.MaxReceives, opts.DefaultDelay = 0, 0
	}
	if opts, err := opts.withDefaults(""); err != nil {
		return nil, err
	} else if opts.Visibility > MaxVisibility {
		return nil, err
	}
	for _, v := range []*storeView{sq.msgs, sq.dels, sq.recvs} {
		v.reopen()
	}
	q := newQueue(s.dir, opts, owner)
	q.st = &storeRef{s: s, sq: sq}
	q.log, q.dels = sq.msgs, sq.dels
	if opts.MaxReceives > 0 || sq.recvs.Next() > 0 {
		q.recvs = sq.recvs
	}
	if err := q.start(); err != nil {
		return nil, err
	}
	return q, nil
}

// openDeadLetters opens the dead-letter queue of q, a queue of the store:
// the queue NAME.dead, when MaxReceives > 0 or the store has it.
func (s *Store) openDeadLetters(q *Queue) error {
	name := q.st.sq.name + deadSuffix
	if q.opts.MaxReceives == 0 {
		if _, err := s.lookup(name, false); err != nil {
			return nil
		}
	}
	d, err := s.queue(name, QueueOptions{}, q)
	if err != nil {
		return err
	}
	q.dead = d
	return nil
}

// writeHead appends h, sq's head, to the heads log. The store's
// checkpoint syncs the log before it removes anything h lets go.
func (s *Store) writeHead(sq *storeQueue, h headState) error {
	b := headRecord(sq.id, h)
	// The record and sq.head change together, under s.mu: a compaction
	// of the heads log copies sq.head, and its copy must never land
	// after a newer record of the queue.
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.heads.Append(b); err != nil {
		return fmt.Errorf("pagelog: head of queue %q: %w", sq.name, err)
	}
	if !sq.hasHead {
		s.headBytes += int64(len(b))
	}
	sq.head, sq.hasHead = h, true
	return nil
}

// headOf returns sq's head as the store last wrote or read it.
func (s *Store) headOf(sq *storeQueue) (headState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sq.head, sq.hasHead
}

// PauseDrops keeps the store's checkpoints from removing segments of its
// shared logs until resume is called (once; later calls do nothing): a
// reader of the store's files beside it (StoreMessages, a snapshot of
// every queue) then finds every record that was there when it began.
// Everything else goes on; the segments below every head stay on disk
// until the first checkpoint after the last resume.
func (s *Store) PauseDrops() (resume func()) {
	s.paused.Add(1)
	// A checkpoint that looked before the count went up ends first.
	s.ckMu.Lock()
	s.ckMu.Unlock()
	return sync.OnceFunc(func() { s.paused.Add(-1) })
}

// Checkpoint writes the heads of the queues that changed and syncs them,
// and removes the shared segments no queue needs any more, now rather
// than at the next CheckpointInterval.
func (s *Store) Checkpoint() error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("pagelog: store %s: %w", s.dir, engine.ErrClosed)
	}
	err := s.checkpoint()
	s.noteCheckpoint(err)
	return err
}

// tick runs the store's checkpoint every CheckpointInterval: one timer
// for the whole store.
func (s *Store) tick() {
	s.tickMu.Lock()
	stopped := s.stopped
	s.tickMu.Unlock()
	if stopped {
		return
	}
	s.noteCheckpoint(s.checkpoint())
	s.tickMu.Lock()
	if !s.stopped {
		s.timer = s.qopts.Clock.AfterFunc(s.qopts.CheckpointInterval, s.tick)
	}
	s.tickMu.Unlock()
}

// checkpointSoon brings forward the checkpoint of sq, whose head left the
// oldest segment of the message log it reaches into (Queue.noteHead): the
// store checkpoints the queues that asked and removes the shared segments
// no queue needs any more now, or once an eighth of CheckpointInterval
// has passed since the last checkpoint, rather than at the next tick.
// As for a queue that owns its directory, the segments the head leaves
// are then dropped one at a time and their files reused, rather than
// made anew while the tick is pending. Only the queues that asked are
// checkpointed.
//
// A store of more than earlyQueues queues leaves it to the tick: there
// the segment is most often held by other queues still, and each early
// checkpoint would look at every queue for its drop point.
func (s *Store) checkpointSoon(sq *storeQueue) {
	s.mu.Lock()
	many := len(s.byID) > earlyQueues
	s.mu.Unlock()
	if many {
		return
	}
	s.tickMu.Lock()
	if s.stopped {
		s.tickMu.Unlock()
		return
	}
	s.early = append(s.early, sq)
	if s.earlyArmed {
		s.tickMu.Unlock()
		return
	}
	s.earlyArmed = true
	s.earlyRuns.Add(1)
	run := func() {
		defer s.earlyRuns.Done()
		s.earlyTick()
	}
	due := s.lastCk.Load() + int64(s.qopts.CheckpointInterval/8)
	if wait := due - s.qopts.Clock.Now().UnixNano(); wait > 0 {
		s.earlyTimer = s.qopts.Clock.AfterFunc(time.Duration(wait), run)
		s.tickMu.Unlock()
		return
	}
	s.tickMu.Unlock()
	// Not on the caller's goroutine: a queue's Close waits for that one,
	// and the checkpoint may open queues (their openMu held by the
	// closing caller).
	go run()
}

// earlyQueues is the most queues a store may hold for checkpointSoon to
// bring a checkpoint forward.
const earlyQueues = 1024

// earlyTick runs the checkpoint checkpointSoon brought forward.
func (s *Store) earlyTick() {
	s.tickMu.Lock()
	qs, stopped := s.early, s.stopped
	s.early, s.earlyArmed, s.earlyTimer = nil, false, nil
	s.tickMu.Unlock()
	if !stopped && len(qs) > 0 {
		s.noteCheckpoint(s.checkpointOf(qs))
	}
}

func (s *Store) noteCheckpoint(err error) {
	if err == nil {
		s.ckErr.Store(nil)
		return
	}
	s.ckErr.Store(&err)
}

// checkpoint writes the heads of the queues that changed, syncs the heads
// log, and removes the segments of the shared logs that no queue reaches
// into any more. A queue that holds the oldest segment of a shared log
// with more segments than MaxHeldSegments allows is opened, so that its
// checkpoint moves its few live messages out of it.
func (s *Store) checkpoint() error { return s.checkpointOf(nil) }

// checkpointOf is checkpoint, of the queues only when only is not nil (a
// checkpoint brought forward: see checkpointSoon).
func (s *Store) checkpointOf(only []*storeQueue) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	s.lastCk.Store(s.qopts.Clock.Now().UnixNano())
	errs := s.openHolders(s.holders())
	s.mu.Lock()
	var open []queueOf
	if only != nil {
		for _, sq := range only {
			// A queue deleted or closed since it asked is left alone.
			if sq.q != nil && s.byID[sq.id] == sq {
				open = append(open, queueOf{sq, sq.q})
			}
		}
	} else {
		for _, sq := range s.byID {
			if sq.q != nil && (sq.keep || sq.dirty.Load() || s.holds(sq)) {
				open = append(open, queueOf{sq, sq.q}) // sq.q is set under s.mu
			}
		}
	}
	s.mu.Unlock()
	for _, e := range open {
		sq, q := e.sq, e.q
		if q.closed.Load() {
			continue // its Close wrote its last head
		}
		sq.dirty.Store(false)
		if s.holdsLocking(sq) {
			q.readAhead()
		}
		q.ck.mu.Lock()
		if !q.ck.stopped {
			errs = append(errs, q.checkpoint())
		}
		keep := q.ck.dropPending || q.ck.held != 0
		q.ck.mu.Unlock()
		sq.keep = keep
	}
	// The drop points are taken before the heads log is synced: a view
	// trims its map only after its head record is appended, so every
	// trim they see is covered by the sync (a queue closed meanwhile
	// writes its head outside this checkpoint).
	lows, drop := s.dropPoints()
	errs = append(errs, s.heads.Sync())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if drop {
		errs = append(errs, s.dropShared(lows))
	}
	errs = append(errs, s.compactHeads())
	return errors.Join(errs...)
}

// holds reports whether sq holds the oldest segment of the message log
// while the log has more segments than a queue may hold. Called with s.mu
// held.
func (s *Store) holds(sq *storeQueue) bool {
	limit := s.qopts.MaxHeldSegments + 1
	if _, _, _, n := s.msgs.l.SegmentOf(0); n <= limit {
		return false
	}
	return sq.msgs.segments() > limit
}

func (s *Store) holdsLocking(sq *storeQueue) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds(sq)
}

// readAhead moves q's cursor to the end of its records in the oldest
// segment of the message log, making the messages it passes ready (or
// delayed, waiting, dying, as a receive would): a move takes only the
// messages the queue has looked at, and a queue of a store holds the
// shared log whether or not anyone receives from it.
func (q *Queue) readAhead() {
	_, b1, ok := q.log.oldestSegment()
	if !ok {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return
	}
	now := q.now()
	for c := q.t.Cursor(); c < b1 && c < q.end(); c = q.t.Cursor() {
		i, r, _, found, err := q.scan(now)
		if err != nil {
			break
		}
		if found {
			r.Release()
			q.es.set(i, stReady, 0)
			q.waiters.wake(1)
		} else if q.t.Cursor() == c {
			break // no way on
		}
	}
	q.armTimer(now)
}

// holders returns the queues not open in this process that hold the
// oldest segment of the message log or the delete log while that log has
// more segments than a queue may hold: opened, their checkpoints move
// their messages on or let the records go.
func (s *Store) holders() []*storeQueue {
	limit := s.qopts.MaxHeldSegments + 1
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*storeQueue
	_, _, _, nm := s.msgs.l.SegmentOf(0)
	_, _, _, nd := s.dels.l.SegmentOf(0)
	if nm <= limit && nd <= limit {
		return nil
	}
	for _, sq := range s.byID {
		if sq.q != nil && !sq.q.closed.Load() {
			continue // open: its checkpoint moves
		}
		if !(nm > limit && sq.msgs.segments() >= nm || nd > limit && sq.dels.segments() >= nd) {
			continue
		}
		if src := s.byName[trimDead(sq.name)]; src != nil && src != sq {
			sq = src // a dead-letter queue opens with its source
		}
		out = append(out, sq)
	}
	return out
}

// openHolders opens the queues holders found, so that their checkpoints
// move their messages on. A queue deleted since holders looked is left
// alone: opened by its name, it would be created again.
func (s *Store) openHolders(hs []*storeQueue) []error {
	var errs []error
	for _, sq := range hs {
		if _, err := s.queueFound(sq, QueueOptions{}, nil); err != nil && !errors.Is(err, engine.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errs
}

// dropShared removes the segments of the shared logs that lie wholly
// below every queue's first record in them.
func (s *Store) dropShared(lows [3]uint64) error {
	var errs []error
	for i, sh := range []*sharedLog{s.msgs, s.dels, s.recvs} {
		if _, err := sh.l.DropBefore(lows[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropPoints returns, for each shared log, the position below which no
// queue has a record it may still need; drop is false when nothing is to
// be removed (drops paused, or only active segments).
func (s *Store) dropPoints() (lows [3]uint64, drop bool) {
	if s.paused.Load() > 0 {
		return lows, false // the next checkpoint after the last resume drops
	}
	several := false
	for _, sh := range []*sharedLog{s.msgs, s.dels, s.recvs} {
		if _, _, _, n := sh.l.SegmentOf(0); n > 1 {
			several = true
		}
	}
	if !several {
		return lows, false
	}
	s.mu.Lock()
	lows = [3]uint64{s.msgs.l.Next(), s.dels.l.Next(), s.recvs.l.Next()}
	for _, sq := range s.byID {
		for i, v := range []*storeView{sq.msgs, sq.dels, sq.recvs} {
			if p, ok := v.low(); ok {
				lows[i] = min(lows[i], p)
			}
		}
	}
	s.mu.Unlock()
	return lows, true
}

// compactHeads writes every queue's head again at the end of the heads
// log and removes the segments before, once the log holds more than
// twice the live heads (and more than one segment).
func (s *Store) compactHeads() error {
	if s.heads.Stats().Segments < 3 {
		return nil
	}
	s.mu.Lock()
	if s.heads.Stats().Bytes < 2*s.headBytes+headsSlack {
		s.mu.Unlock()
		return nil
	}
	start := s.heads.Next()
	// Under s.mu, so that no queue's newer head lands before its copy
	// here (the newest record of a queue wins at open).
	bodies := make([][]byte, 0, 4096)
	var err error
	for _, sq := range s.byID {
		if !sq.hasHead {
			continue
		}
		if bodies = append(bodies, headRecord(sq.id, sq.head)); len(bodies) == cap(bodies) {
			_, _, err = s.heads.AppendBatch(bodies, nil)
			bodies = bodies[:0]
		}
		if err != nil {
			break
		}
	}
	if err == nil && len(bodies) > 0 {
		_, _, err = s.heads.AppendBatch(bodies, nil)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.heads.Sync(); err != nil {
		return err
	}
	_, err = s.heads.DropBefore(start)
	return err
}

// The heads log's segment size, and the bytes of old records beyond twice
// the live heads that start a compaction (variables so that tests can
// compact sooner).
var (
	headsSegmentBytes int64 = 4 << 20
	headsSlack        int64 = 8 << 20
)

// headRecord is the heads-log record of queue id's head h.
func headRecord(id uint32, h headState) []byte {
	b := make([]byte, 4, 4+headSize)
	binary.BigEndian.PutUint32(b, id)
	return append(b, encodeHead(h)...)
}

// DeleteQueue deletes the queue name and its dead-letter queue: their
// messages are gone from Receive and every reader at once (their records
// are removed with the shared segments, as the other queues' heads
// move), their receivers blocked in Receive get ErrClosed, and a queue
// created later under the name starts empty.
func (s *Store) DeleteQueue(name string) error {
	if err := CheckQueueName(name); err != nil && CheckQueueName(trimDead(name)) != nil {
		return err
	}
	sq, err := s.lookup(name, false)
	if err != nil {
		return err
	}
	var errs []error
	sq.openMu.Lock()
	if q := sq.q; q != nil && !q.closed.Load() {
		if q.owner != nil && !q.owner.closed.Load() {
			sq.openMu.Unlock()
			return fmt.Errorf("pagelog: queue %q is the dead-letter queue of an open queue: delete that one", name)
		}
		errs = append(errs, q.close())
	}
	s.mu.Lock()
	if s.byID[sq.id] != sq {
		s.mu.Unlock()
		sq.openMu.Unlock()
		return fmt.Errorf("%w: %q in store %s", ErrNoQueue, name, s.dir)
	}
	at, err := s.names.Append(encodeName(nameDelete, sq.id, ""))
	if err == nil {
		delete(s.byID, sq.id)
		delete(s.byName, sq.name)
		if sq.hasHead {
			s.headBytes -= 4 + headSize
		}
		for _, v := range []*storeView{sq.msgs, sq.dels, sq.recvs} {
			v.forget()
		}
	}
	s.mu.Unlock()
	sq.openMu.Unlock()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("pagelog: delete queue %q: %w", name, err))...)
	}
	if s.opts.Log.Sync != engine.SyncNone {
		errs = append(errs, s.names.WaitDurable(context.Background(), at))
	}
	if dead := name + deadSuffix; trimDead(name) == name {
		if _, err := s.lookup(dead, false); err == nil {
			errs = append(errs, s.DeleteQueue(dead))
		}
	}
	return errors.Join(errs...)
}

// Names returns the names of the store's queues, sorted.
func (s *Store) Names() []string {
	s.mu.Lock()
	out := make([]string, 0, len(s.byName))
	for name := range s.byName {
		out = append(out, name)
	}
	s.mu.Unlock()
	slices.Sort(out)
	return out
}

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
