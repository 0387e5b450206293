package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/regfile"
)

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
	created := map[uint32]bool{}   // ids given a name: an id is never given twice
	unnamed := map[uint32]uint64{} // ids of records with no name: their shared-log records
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
		if !created[id] && !deleted[id] {
			unnamed[id] += 0
		}
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
				if !created[a.Queue] && !deleted[a.Queue] {
					unnamed[a.Queue]++
				}
				continue
			}
			if !sh.view(sq).push(a.QueueOffset, r.Offset) {
				damaged(sh.what, fmt.Errorf("%w: record %d has offset %d of queue %q, at or below one before it or far past it", engine.ErrCorrupt, r.Offset, a.QueueOffset, sq.name))
			}
		}
	}
	// The names log is never trimmed: records of an id it neither names
	// nor deletes lost their queue's name record, and the queue with it
	// (a removed or damaged names segment, the names log's unsynced tail
	// in a power failure, or records from another store).
	for _, id := range slices.Sorted(maps.Keys(unnamed)) {
		damaged("names log", fmt.Errorf("%w: queue id %d has a head or %d records in the shared logs but no name: its queue's name record is lost, and its messages are orphans", engine.ErrCorrupt, id, unnamed[id]))
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
