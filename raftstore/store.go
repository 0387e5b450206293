package raftstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
)

// Errors. Test for them with errors.Is.
var (
	// ErrKeyNotFound is what Get and GetUint64 return for a key never set.
	// Its text is exactly "not found": raft compares the text.
	ErrKeyNotFound = errors.New("not found")
	// ErrNotContiguous: StoreLogs was given entries whose indexes do not
	// follow each other, or do not follow the last stored entry. Nothing
	// was written.
	ErrNotContiguous = errors.New("raftstore: entries are not contiguous")
	// ErrMiddleRange: DeleteRange was asked for a range that is neither a
	// prefix nor a suffix of the stored entries (raft never asks for one).
	// Nothing was deleted.
	ErrMiddleRange = errors.New("raftstore: only a prefix or a suffix of the log can be deleted")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("raftstore: closed")
	// ErrBadFile: one of the store's own small files (raft.bounds,
	// raft.stable, raft.node) fails its checks.
	ErrBadFile = errors.New("raftstore: damaged file")
	// ErrCorrupt matches a stored entry that fails its checks (the log's
	// checksum and id, or the entry header).
	ErrCorrupt = engine.ErrCorrupt
	// ErrLocked: another Store has the directory open.
	ErrLocked = engine.ErrLocked
)

// The store's directory.
const (
	logDir   = "log"       // the pagelog log: one record per entry
	resetDir = "log.reset" // a log being removed whole (see reset)
)

// DefaultMaxEntryBytes is the largest entry body (header, extensions and
// data) a new store accepts when Options.Log.MaxRecordBytes is 0: raft
// batches commands into one entry, so the log's 1 MiB default is raised.
const DefaultMaxEntryBytes = 8 << 20

// Options configure a Store.
type Options struct {
	// Log configures the pagelog log that holds the entries (segment size,
	// index spacing, largest record, file modes). Its Sync is ignored:
	// the log runs SyncAlways, unless NoSync. Its FirstOffset is the index
	// the first entry of a new store is expected at (0 means 1, raft's
	// first index); a first StoreLogs at another index starts the log
	// there instead. ReadOnly is refused.
	Log engine.Options
	// NoSync skips every fsync: entries, the stable store and the store's
	// own files. A store that loses power may then forget what it
	// acknowledged, which raft cannot tolerate. For tests only.
	NoSync bool
}

// Recovery tells what Open found and did.
type Recovery struct {
	Log   engine.Recovery // what opening the log found
	Notes []string        // what the store itself repaired, and why
}

// Store is a raft.LogStore, raft.MonotonicLogStore and raft.StableStore on
// a pagelog log. See the package documentation for the files, durability
// and concurrency.
type Store struct {
	dir      string
	opts     Options
	fileMode fs.FileMode
	lock     *os.File

	// log is the open log: nil after Close, and while reset replaces it
	// (the store is empty then).
	log atomic.Pointer[engine.Log]
	// first and cut mirror bounds for readers.
	first atomic.Uint64
	cut   atomic.Uint64
	// closed is set by Close before it takes the locks.
	closed atomic.Bool

	wmu    sync.Mutex // serializes StoreLogs, DeleteRange and Close
	bounds bounds     // as in raft.bounds (under wmu)
	buf    []byte     // encoding buffer of StoreLogs (under wmu)
	bodies [][]byte   // the batch's record bodies (under wmu)

	kvMu sync.Mutex // the stable store
	kv   map[string][]byte

	recovery Recovery
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
	_ raft.StableStore       = (*Store)(nil)
)

// Open opens the store in dir, creating it if needed. It finishes what a
// crash interrupted: a suffix DeleteRange is completed (the entries at and
// after its start are removed), a front DeleteRange drops the segments it
// had left, a log being replaced is removed. A damaged raft.stable is an
// error (raft's term and vote must never be forgotten); a damaged
// raft.bounds is reported in Recovery and ignored.
func Open(dir string, o Options) (*Store, error) {
	if err := engine.Supported(); err != nil {
		return nil, err
	}
	if o.Log.ReadOnly {
		return nil, fmt.Errorf("%w: raftstore: a store cannot be opened read-only", engine.ErrBadOptions)
	}
	if err := o.Log.Validate(); err != nil {
		return nil, err
	}
	o.Log.Sync = engine.SyncAlways
	if o.NoSync {
		o.Log.Sync = engine.SyncNone
	}
	if o.Log.FirstOffset == 0 {
		o.Log.FirstOffset = 1
	}
	if o.Log.MaxRecordBytes == 0 {
		o.Log.MaxRecordBytes = DefaultMaxEntryBytes
	}
	s := &Store{dir: dir, opts: o, fileMode: o.Log.FileMode, bounds: bounds{cut: noCut}}
	if s.fileMode == 0 {
		s.fileMode = 0o600
	}
	dirMode := o.Log.DirMode
	if dirMode == 0 {
		dirMode = 0o700
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	lock, err := lockDir(dir, s.fileMode)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	if err := s.open(); err != nil {
		if l := s.log.Load(); l != nil {
			_ = l.Close()
		}
		_ = unlockAndClose(lock)
		return nil, err
	}
	return s, nil
}

func (s *Store) open() error {
	b, ok, err := readFile(s.dir, stableName)
	if err != nil {
		return err
	}
	s.kv = map[string][]byte{}
	if ok {
		if s.kv, err = decodeStable(b); err != nil {
			return fmt.Errorf("%w (the current term and vote would be lost: restore the file, or remove it knowingly)", err)
		}
	}
	b, ok, err = readFile(s.dir, boundsName)
	if err != nil {
		return err
	}
	if ok && len(b) >= 5 && b[0] > boundsVersion {
		if _, sealed := unseal(b); sealed {
			// A newer version's file: never overwritten.
			return fmt.Errorf("%w: %s: version %d, written by a newer version; this build reads %d and never overwrites it",
				ErrBadFile, boundsName, b[0], boundsVersion)
		}
	}
	if ok {
		if s.bounds, err = decodeBounds(b); err != nil {
			s.bounds = bounds{cut: noCut}
			s.note("%v: ignored (the log's own first offset is used)", err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.dir, resetDir)); err == nil {
		if err := s.removeReset(); err != nil {
			return err
		}
		s.note("removed %s: a log being replaced when the store stopped", resetDir)
	}
	l, err := s.openLog(max(s.bounds.first, s.opts.Log.FirstOffset))
	if err != nil {
		return err
	}
	s.log.Store(l)
	s.recovery.Log = l.Recovery()
	s.first.Store(s.bounds.first)
	s.cut.Store(s.bounds.cut)
	return s.finish(l)
}

// openLog opens the log, creating it with its first offset at start if it
// does not exist (a new store, or one whose reset stopped part way: it is
// empty, and starts at the first index its bounds allow).
func (s *Store) openLog(start uint64) (*engine.Log, error) {
	o := s.opts.Log
	o.FirstOffset = start
	return engine.Open(filepath.Join(s.dir, logDir), o)
}

// finish completes what a crash interrupted: a pending cut is applied, and
// whole segments below the first entry are dropped.
func (s *Store) finish(l *engine.Log) error {
	if c := s.bounds.cut; c != noCut {
		if c < l.Next() {
			if err := l.Truncate(max(c, l.First())); err != nil {
				return fmt.Errorf("raftstore: completing the interrupted DeleteRange from %d: %w", c, err)
			}
			s.note("completed the deletion of the entries from %d on (a DeleteRange that had not finished)", c)
		}
		if err := s.setBounds(bounds{first: s.bounds.first, cut: noCut}); err != nil {
			return err
		}
	}
	if s.bounds.first > l.First() {
		if _, err := l.DropBefore(s.bounds.first); err != nil {
			return fmt.Errorf("raftstore: dropping segments below entry %d: %w", s.bounds.first, err)
		}
	}
	return nil
}

// setBounds makes b durable, then current.
func (s *Store) setBounds(b bounds) error {
	if err := replaceFile(s.dir, boundsName, b.encode(), s.fileMode, s.opts.NoSync); err != nil {
		return err
	}
	s.bounds = b
	s.first.Store(b.first)
	s.cut.Store(b.cut)
	return nil
}

// removeReset removes the directory of a log being replaced; the rename
// that made it was durable, so a crash here leaves nothing that matters.
func (s *Store) removeReset() error {
	if err := os.RemoveAll(filepath.Join(s.dir, resetDir)); err != nil {
		return fmt.Errorf("raftstore: remove %s: %w", resetDir, err)
	}
	return nil
}

func (s *Store) note(format string, args ...any) {
	s.recovery.Notes = append(s.recovery.Notes, fmt.Sprintf(format, args...))
}

// Recovery returns what Open found and did.
func (s *Store) Recovery() Recovery { return s.recovery }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close closes the log and releases the directory. Calls after Close (and
// calls racing it) return ErrClosed; entries they returned stay valid. A
// second Close returns ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	var errs []error
	if l := s.log.Swap(nil); l != nil {
		errs = append(errs, l.Close())
	}
	errs = append(errs, unlockAndClose(s.lock))
	return errors.Join(errs...)
}
