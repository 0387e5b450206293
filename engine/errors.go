package engine

import (
	"errors"

	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/internal/segment"
)

// Errors returned by the engine. They are wrapped with context (offset,
// segment, position); test for them with errors.Is.
var (
	// ErrNotFound: the offset is below the log's first offset or at or
	// beyond its end.
	ErrNotFound = segment.ErrNotFound
	// ErrCorrupt: a record that must be there fails its checksum or id
	// check. The message names the segment and position.
	ErrCorrupt = segment.ErrCorrupt
	// ErrClosed: the log (or queue) was closed.
	ErrClosed = errors.New("pagelog: closed")
	// ErrTooLarge: the body exceeds MaxRecordBytes; nothing was written.
	ErrTooLarge = errors.New("pagelog: record too large")
	// ErrLocked: another Log (in this or another process) has the
	// directory open for writing.
	ErrLocked = errors.New("pagelog: directory is locked by another writer")
	// ErrReadOnly: a write was attempted on a log opened read-only.
	ErrReadOnly = errors.New("pagelog: log is read-only")
	// ErrSyncFailed: an earlier fsync (or the sealing of a segment) failed.
	// The kernel may have dropped the dirty pages, so the log refuses
	// appends, and never acknowledges what the failed sync covered, until
	// it is reopened and recovered.
	ErrSyncFailed = errors.New("pagelog: a sync to disk failed; reopen the log to recover")
	// ErrInvalidAttrs: the attributes passed to AppendWith are malformed.
	ErrInvalidAttrs = record.ErrInvalidAttrs
	// ErrBadOptions: Options hold a value the engine cannot use.
	ErrBadOptions = errors.New("pagelog: bad options")
	// ErrNoLog: a read-only open (or a tool that must not create a log)
	// found no log in the directory: no log.meta and no segment file.
	ErrNoLog = errors.New("pagelog: no log in this directory")
	// ErrBadFile: a small checkpoint file (log.meta, log.clean,
	// log.recovery, queue.head) fails its checks. It is never trusted:
	// what it would have said is taken from the log instead, and the
	// report says so.
	ErrBadFile = checkpoint.ErrBadFile
	// ErrFull: the log has used up its offsets (the next offset would be
	// 2^64 - 1); nothing was written.
	ErrFull = errors.New("pagelog: no offsets left")
	// ErrMisnamed: a segment file's first record carries another id than
	// its name says (the file was renamed or copied). Writable opens
	// refuse such a newest segment; Recover renames it back. It matches
	// ErrCorrupt too.
	ErrMisnamed = segment.ErrMisnamed
	// ErrNotRegular: something other than a regular file (a FIFO, a
	// symbolic link, a directory, a device) is where the log keeps one of
	// its files; the error names the path. It is never opened through,
	// so a FIFO never blocks and a link never leads a write outside the
	// directory.
	ErrNotRegular = regfile.ErrNotRegular
	// ErrNewerFile: a file of the log (log.meta, log.id, log.clean,
	// log.recovery, a cursor's file, queue.head) was written by a newer
	// version of pagelog: its version byte is above the one this build
	// reads and its checksum checks out. It is never overwritten or
	// removed: an open that would replace it fails instead. It matches
	// ErrBadFile too.
	ErrNewerFile = checkpoint.ErrNewer
)
