package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/mmapfile"
)

// CursorOptions configure a Cursor. The zero value is a cursor that starts
// at the log's first record, whose commits survive a crash of the process
// (not a power failure), and that sleeps while it waits.
type CursorOptions struct {
	// FromEnd starts a new cursor (one never committed) at the end of the
	// log: it sees only records appended after it was first opened. The
	// position is committed at once, so a restart before the first Commit
	// skips nothing appended meanwhile.
	FromEnd bool
	// Sync says when Commit is durable: SyncNone (the default) once the
	// position is in the page cache, which survives a crash of the
	// process; SyncAlways after an fdatasync of the position file, which
	// survives a power failure; SyncInterval by a background fdatasync
	// every SyncInterval (default 100 ms).
	Sync         SyncPolicy
	SyncInterval time.Duration
	// Spin is how long Next looks for the next record without sleeping
	// before it blocks (Options.WaitSpin of the log it reads).
	Spin time.Duration
}

// Cursor is a consumer's position in a log, kept in a small file of its
// own under the log's directory: it can be opened by any process, beside
// the one that appends (the log is only read), and resumes where its last
// Commit left it. Next, Commit, Seek and Position are for one goroutine at
// a time; Close may be called from another to end a Next that waits.
type Cursor struct {
	name  string
	path  string
	log   *Log
	opts  CursorOptions
	f     *os.File
	mem   []byte // the position file, mapped writable
	pos   atomic.Uint64
	seq   uint64 // the last commit number
	notes []string

	mu     sync.Mutex // serializes Commit, the background sync and Close
	dirty  bool       // committed since the last sync (SyncInterval)
	failed error      // a failed sync: commits are refused
	closed atomic.Bool
	stop   chan struct{}
	bg     sync.WaitGroup
}

// CursorInfo describes a cursor of a log (see Cursors).
type CursorInfo struct {
	Name      string
	Position  uint64    // the committed position: the offset it resumes at
	Lag       uint64    // records from Position to the log's end
	Committed time.Time // when the position was committed (zero: unknown)
	Damaged   string    // why the position file is not trusted ("" when it is)
}

// ErrBadCursorName: a cursor name is empty, too long, or holds characters
// other than letters, digits, '.', '_' and '-' (or starts with '.').
var ErrBadCursorName = errors.New("pagelog: bad cursor name")

func checkCursorName(name string) error {
	if name == "" || len(name) > maxCursorName || name[0] == '.' {
		return fmt.Errorf("%w %q: 1 to %d letters, digits, '.', '_' or '-', not starting with '.'", ErrBadCursorName, name, maxCursorName)
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w %q: 1 to %d letters, digits, '.', '_' or '-', not starting with '.'", ErrBadCursorName, name, maxCursorName)
		}
	}
	return nil
}

// OpenCursor opens the cursor called name of the log in dir, creating it
// if it does not exist, and positions it where its last Commit left it. A
// second opener of the same name, in this process or another, gets an
// error matching ErrLocked until the first closes it. The log is opened
// read-only and never written; the cursor's file is created under
// dir/cursors/.
func OpenCursor(dir, name string, o CursorOptions) (*Cursor, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	if err := checkCursorName(name); err != nil {
		return nil, err
	}
	if o.Sync < SyncNone || o.Sync > SyncInterval || o.SyncInterval < 0 {
		return nil, fmt.Errorf("%w: cursor sync policy %d, interval %v", ErrBadOptions, int(o.Sync), o.SyncInterval)
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	l, err := OpenReadOnly(dir, Options{WaitSpin: o.Spin})
	if err != nil {
		return nil, err
	}
	c := &Cursor{name: name, path: filepath.Join(dir, cursorDir, name), log: l, opts: o, stop: make(chan struct{})}
	l.fol.waited.Store(true) // a stream's reader: dropped segments are let go
	if err := c.open(dir); err != nil {
		c.release()
		_ = l.Close()
		return nil, err
	}
	if o.Sync == SyncInterval {
		c.bg.Add(1)
		go c.syncLoop()
	}
	return c, nil
}

// open takes the position file (creating it) and reads the position.
func (c *Cursor) open(dir string) error {
	cdir := filepath.Join(dir, cursorDir)
	made := false
	d, err := regfile.OpenDir(cdir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(cdir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
		}
		made = true
		d, err = regfile.OpenDir(cdir)
	}
	if err != nil {
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
	}
	defer d.Close()
	// Never through a link, never blocking on a FIFO: see regfile.
	f, err := regfile.OpenIn(d, c.name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
	}
	// Rewritten in place: never through a hard link either.
	if err := regfile.SoleName(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
	}
	c.f = f
	if err := flockNB(f); errors.Is(err, errWouldBlock) {
		return fmt.Errorf("%w: cursor %q of %s is open elsewhere", ErrLocked, c.name, dir)
	} else if err != nil {
		return fmt.Errorf("pagelog: cursor %s: lock: %w", c.name, err)
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
	}
	b := make([]byte, cursorIDEnd)
	if n, err := f.ReadAt(b, 0); err != nil && int64(n) < min(st.Size(), cursorIDEnd) {
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
	}
	b = b[:max(cursorFileSize, min(st.Size(), cursorIDEnd))] // a short file reads as zeros after its end
	if v, newer := newerSlot(b); newer {
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, &checkpoint.BadFileError{Name: cursorDir + "/" + c.name, Newer: true,
			Why: fmt.Sprintf("a slot checks out under version %d, this build reads %d and never overwrites it", v, cursorVersion)})
	}
	logID, hasID, err := readLogID(dir)
	if errors.Is(err, ErrNewerFile) || errors.Is(err, ErrNotRegular) {
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
	}
	created := st.Size() == 0
	// Allocated before it is mapped, a file found at its size too (and
	// grown to hold the identity slot): a store into a hole of a full
	// file system raises SIGBUS, where fallocate fails with ENOSPC.
	if err := mmapfile.Allocate(f, 0, cursorIDEnd); err != nil {
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
	}
	if c.mem, err = mmapfile.Map(f, cursorFileSize, true); err != nil {
		return fmt.Errorf("pagelog: cursor %s: %w", c.name, err)
	}
	slot, ok, why := readCursor(b)
	l := c.log
	pos := l.First()
	foreign := ""
	if ok {
		foreign = foreignCursor(b, logID, hasID)
	}
	switch {
	case foreign != "":
		c.notes = append(c.notes, fmt.Sprintf("committed position %d not trusted (%s): starting at the first record, %d", slot.pos, foreign, pos))
		ok = false
	case ok:
		pos, c.seq = slot.pos, slot.seq
		if next := l.Next(); pos > next {
			c.notes = append(c.notes, fmt.Sprintf(
				"committed position %d is past the log's end %d (records were cut or lost): going on at %d", pos, next, next))
			pos = next
		}
	case why != "":
		c.notes = append(c.notes, fmt.Sprintf("position file not trusted (%s): starting at the first record, %d", why, pos))
	case c.opts.FromEnd:
		pos = l.Next()
	}
	c.pos.Store(pos)
	if !ok {
		// The starting position is committed at once: a restart before
		// the first Commit starts from the same place. Synced before the
		// identity is written, so that a crash in between never pairs an
		// old position with this log's identity.
		if slot.seq > c.seq {
			c.seq = slot.seq // above the foreign commits: this one wins
		}
		if err := c.commit(pos, true); err != nil {
			return err
		}
	}
	if want := cursorIDSlot(logID, hasID); !bytes.Equal(b[min(len(b), cursorIDAt):], want) {
		if err := c.writeID(want); err != nil {
			return err
		}
	}
	if created || made {
		if made {
			_ = syncDir(dir)
		}
		if err := syncDir(filepath.Join(dir, cursorDir)); err != nil {
			return err
		}
	}
	return nil
}

// writeID writes the identity slot and syncs it.
func (c *Cursor) writeID(slot []byte) error {
	if _, err := c.f.WriteAt(slot, cursorIDAt); err != nil {
		return fmt.Errorf("pagelog: cursor %s: identity: %w", c.name, err)
	}
	if err := c.syncLocked(); err != nil {
		return err
	}
	return nil
}

// Name returns the cursor's name.
func (c *Cursor) Name() string { return c.name }

// Log returns the read-only log the cursor reads (for Next and First; it
// is closed with the cursor).
func (c *Cursor) Log() *Log { return c.log }

// Notes says what opening the cursor found that it did not expect: a
// position file that was not trusted, a position past the log's end.
func (c *Cursor) Notes() []string { return slices.Clone(c.notes) }

// Position returns the offset the next Next returns (or waits for).
func (c *Cursor) Position() uint64 { return c.pos.Load() }

// Next returns the record at the cursor's position and moves past it,
// waiting for it if it is not appended yet (until ctx ends). The record's
// Body is valid until it is released, as after Read. Errors are those of
// Log.ReadNext, each returned once: the cursor moves past what it reports.
func (c *Cursor) Next(ctx context.Context) (Record, error) {
	if c.closed.Load() {
		return Record{}, ErrClosed
	}
	rec, next, err := c.log.ReadNext(ctx, c.pos.Load())
	if err != nil && next == c.pos.Load() {
		return rec, err // nothing to move past: ctx ended, or closed
	}
	c.pos.Store(next)
	if err != nil {
		return rec, fmt.Errorf("cursor %s: %w", c.name, err)
	}
	return rec, nil
}

// Seek moves the cursor: the next Next returns the record at offset. An
// offset past the log's end gets an error matching ErrNotFound (the
// position is unchanged); one below its first record gets, at the next
// Next, the error that says how many were dropped. Seek does not commit.
func (c *Cursor) Seek(offset uint64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if next := c.log.Next(); offset > next {
		return fmt.Errorf("%w: cursor %s: seek to %d past the log's end %d", ErrNotFound, c.name, offset, next)
	}
	c.pos.Store(offset)
	return nil
}

// Commit stores the position durably (as CursorOptions.Sync says): a
// cursor opened later, in any process, resumes after the last record Next
// returned. At-least-once: records after the last Commit come again after
// a crash, and none before it.
func (c *Cursor) Commit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	return c.commit(c.pos.Load(), c.opts.Sync == SyncAlways)
}

// commit writes pos into the slot the next commit number names, and syncs
// it when sync is set. The caller holds c.mu (or owns c alone).
func (c *Cursor) commit(pos uint64, sync bool) error {
	if c.failed != nil {
		return c.failed
	}
	var b [cursorSlotSize]byte
	c.seq++
	encodeSlot(b[:], c.seq, pos, time.Now().UnixMilli())
	i := int(c.seq%2) * cursorSlotSize
	if sync {
		// Written with pwrite, then synced. Through the mapping the store
		// after each fdatasync takes a write fault first, and ext4's
		// fault handler made the next fdatasync cost twice one of a
		// pwrite (measured on the project's machine when this changed).
		if _, err := c.f.WriteAt(b[:], int64(i)); err != nil {
			c.seq--
			return fmt.Errorf("pagelog: cursor %s: commit: %w", c.name, err)
		}
		c.dirty = true
		return c.syncLocked()
	}
	copy(c.mem[i:i+cursorSlotSize], b[:])
	c.dirty = true
	return nil
}

func (c *Cursor) syncLocked() error {
	if err := mmapfile.Datasync(c.f); err != nil {
		// The page may be lost: no later commit is acknowledged.
		c.failed = fmt.Errorf("%w: cursor %s: %w", ErrSyncFailed, c.name, err)
		return c.failed
	}
	c.dirty = false
	return nil
}

// syncLoop is SyncInterval's background sync.
func (c *Cursor) syncLoop() {
	defer c.bg.Done()
	t := time.NewTicker(c.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.mu.Lock()
			if c.dirty && c.failed == nil && !c.closed.Load() {
				_ = c.syncLocked()
			}
			c.mu.Unlock()
		}
	}
}

// Close closes the cursor and its log; a Next waiting in another goroutine
// returns ErrClosed. Under SyncAlways and SyncInterval it syncs the last
// commit first. It does not commit.
func (c *Cursor) Close() error {
	c.mu.Lock()
	if c.closed.Swap(true) {
		c.mu.Unlock()
		return ErrClosed
	}
	var errs []error
	if c.dirty && c.opts.Sync != SyncNone && c.failed == nil {
		errs = append(errs, c.syncLocked())
	}
	c.mu.Unlock()
	close(c.stop)
	errs = append(errs, c.log.Close())
	c.bg.Wait()
	c.release()
	return errors.Join(errs...)
}

// release unmaps and closes the position file (dropping the lock).
func (c *Cursor) release() {
	if c.mem != nil {
		_ = mmapfile.Unmap(c.mem)
		c.mem = nil
	}
	if c.f != nil {
		_ = unlockAndClose(c.f) // a forked child's copy keeps no lock
		c.f = nil
	}
}
