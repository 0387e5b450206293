// Package engine is pagelog's log: a segmented, append-only, memory-mapped
// log of records in a directory. Append writes a record and returns its
// offset; Read returns the record at an offset, verified (checksum and
// id) and without a copy; Records, ReadNext and Cursor read on from an
// offset, following the writer from other processes too. The work queue
// (package queue) is built on it.
//
// # Caveats: how long a record's bytes live
//
// Record.Body is a slice of a read-only mapping of the segment file, not
// a copy. It is valid until Record.Release, and stays valid until then
// even when the log is closed or the record's segment dropped meanwhile
// (the segment stays mapped while any record of it is held). After
// Release it must not be used: once no record of its segment is held, the
// segment may be unmapped (dropped, or evicted past MaxMappedSegments),
// and a stale Body then faults. With Options.RetireMappings (which the
// queue sets) a given-back mapping is overlaid with zero pages instead,
// so a stale Body reads its own bytes, zeros or a later record of the
// same log, and never crashes the process. Copy what must outlive
// Release. Writing into Body faults: the mapping is read-only. A Record yielded by Records (or RecordsWithAttrs) is valid
// only until the loop body returns: use Read to keep one longer. The
// Group and Dedup slices of Record.Attrs live as long as Body. Releasing
// a record twice (or a copy of it) is harmless.
//
// # Files
//
// A log is a directory: segment files named after the offset of their
// first record (00000000000000000000.log, 20 digits), each with a sparse
// offset index (.index) and a time index (.timeindex), which are caches
// rebuilt from the segment when missing or damaged; log.meta (the
// settings the files were written with), log.id (the log's identity),
// log.clean and log.recovery (checkpoints that spare Open a walk),
// log.notify (the writer's end, which followers in other processes
// watch), LOCK (the writer's flock) and cursors/ (one file per Cursor).
// Only the newest segment is written; a full one is sealed and never
// changes again. FORMAT.md, at the repository's root, describes every
// byte; the engine never trusts a checkpoint file blindly.
//
// # Lifetimes
//
// Open creates or opens the log for writing and holds the directory's
// lock until Close: a second writer, in this process or another, gets
// ErrLocked. OpenReadOnly takes no lock and writes no file of the log,
// so it may run beside the writer, in another process; it sees what was
// whole when it opened and follows the writer from then on (Wait, Read,
// ReadNext, Records), across rolls, drops and restarts. Close stops the
// background work (syncs, preparing the next segment, retention) and,
// under SyncAlways and SyncInterval, syncs what was written; records held
// by callers stay valid until released. OpenCursor opens a named,
// durable position in a log from any process; a second opener of the
// same name gets ErrLocked.
//
// What survives a crash depends on Options.Sync: SyncNone (the default)
// survives kill -9 but not a power failure, SyncAlways returns from Append
// only once an fdatasync covers the record (concurrent appenders share
// it), SyncInterval syncs in the background. WaitDurable and Sync make
// records durable on demand. Open recovers after a crash: it cuts a torn
// tail, rebuilds damaged indexes, and reports damage it never cuts
// (Recovery; Recover with TruncateAtDamage is the only way to cut it).
//
// # Concurrency
//
// One Log writes to a directory. Every method of a Log is safe for
// concurrent use: any number of goroutines may Read, iterate and Wait
// while others Append; appends, rolls and Close are serialized inside the
// Log, and readers take no lock: the end and the segment list are
// published atomically once the bytes are in place, so a reader never
// sees a partly written record. Close, DropBefore and Truncate may run
// beside any other call. A Cursor is for one goroutine at a time (Next,
// Commit, Seek, Position), except that Close may be called from another
// to end a Next that waits.
//
// # Errors
//
// Errors are wrapped with context (the offset, segment and position);
// test them with errors.Is against the sentinels: ErrNotFound (an offset
// outside the log) and ErrTrimmed, which matches it (offsets dropped from
// the front: retention, DropBefore, FirstOffset); ErrCorrupt (a damaged
// record; reads around it go on) and ErrMisnamed, which matches it;
// ErrClosed; ErrTooLarge (nothing was written); ErrLocked; ErrReadOnly;
// ErrSyncFailed (sticky: a failed fsync makes the log refuse appends
// until it is reopened); ErrInvalidAttrs; ErrBadOptions; ErrNoLog;
// ErrBadFile (a checkpoint file that failed its checks: reported, never
// fatal) and ErrNewerFile, which matches it; ErrFull (offsets used up);
// ErrNotRegular (a FIFO, link or directory where a file of the log
// should be); ErrAddressSpace (a 32-bit process cannot map the log);
// ErrBadCursorName. A full disk is an error from the append that needed
// the space, wrapping the system's ENOSPC; nothing acknowledged is lost.
//
// # Following a writer
//
// A log opened with OpenReadOnly follows the process that appends: the
// writer stores its end in log.notify with one atomic store per append,
// and a follower reads it through its own mapping, with no system call
// between the writer's store and the reader holding the record. A
// follower that waits spins on that word (Options.WaitSpin) or sleeps on
// it as a futex (on Linux; elsewhere it polls), and the writer makes the
// wake-up call only when a follower announced that it sleeps. A record is
// served only once it is whole, and no mapped byte past the end of a file
// is ever read.
//
// # More
//
// In the repository's docs/ directory: log.md (options, read-only opens,
// errors), durability.md (sync policies, recovery, the mistakes the log
// guards against), streams.md (following a writer, cursors) and
// platforms.md (what a sync means on each system).
package engine
