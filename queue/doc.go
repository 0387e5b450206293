// Package queue is a durable work queue on a pagelog Log: Send appends a
// message, Receive hands one out and hides it until its deadline, Delete
// acknowledges it; a message not deleted by its deadline is handed out
// again (at-least-once). Messages may be delayed, belong to an ordering
// group, carry a deduplication id, and move to a dead-letter queue after
// too many receives; see Queue for each.
//
// # Files
//
// A queue is a directory: its messages are an ordinary Log in it (so every
// log tool reads them), with their due times, groups, dedup ids and
// origins as record attributes; beside them queue.head (the head
// checkpoint), deletes/ (the delete log) and receives/ (the receive-count
// log, with MaxReceives). The dead-letter queue is a queue directory of
// its own, <dir>.dead by default. FORMAT.md describes every file.
//
// # Held segments
//
// A message that never finishes (stuck in flight, failing again and
// again, delayed far ahead) would hold the head, and with it every
// segment after it. Options.MaxHeldSegments (default 4) bounds that: when
// the oldest segment of the message log holds only a few live messages
// (at most MaxMovedPerSegment and at most an eighth of its records, or a
// single one, not counting messages moved before) and more than
// MaxHeldSegments segments follow it, the queue copies those messages to
// the end of the log, at most MaxMovedPerSegment per move, each with the `moved`
// attribute (the offset consumers know it by, kept through repeated
// moves) and `receives` (its receive count), and the next head checkpoint
// removes the segment. A segment whose live messages are more than that
// because copies gathered there moves only once as many finished records
// follow it as there are copies in the queue: more held messages than
// MaxHeldSegments segments hold are not copied round and round, and the
// log then holds their copies, about as many finished records, and
// MaxHeldSegments segments. The queue looks at each head checkpoint and every
// 64 sends. Consumers see no change: a moved message keeps its Offset,
// body, receive count, due time and group, Delete of that offset works,
// and it is ordered by that offset (in the ready list, in its group, after
// a restart). Delete and receive-count records name the copy, so the side
// logs are trimmed with the head while the queue runs. A crash in the
// middle of a move leaves the original and its copy (or several copies):
// they are one message, handed out once, and deleted when any of them is.
// A move waits for its copies' sync without holding the queue's lock
// (receivers and deleters go on meanwhile); the head passes the originals
// only once the copies are durable, and a Delete of a message whose copy
// is not durable yet returns once it is (under SyncAlways).
// Open finds the copies through the index of them that queue.head keeps
// (version 4, see FORMAT.md), reading only the records it names and the
// log after the checkpoint; without a trustworthy index (an older file, a
// store's queue, damage, an index the log contradicts) it reads the log
// from the head.
//
// # Lifetimes
//
// Open returns a Queue that owns its directory (and its dead-letter
// queue's) until Close: a second Open, in this process or another, gets
// engine.ErrLocked. Message.Body is a zero-copy slice of a read-only
// mapping, valid until the receiver deletes the message, its deadline
// passes, or the queue is closed. Stat and Messages read a queue's files
// without opening it, beside the process that owns it.
//
// # Concurrency
//
// Every method of a Queue is safe for concurrent use. Deadlines, due times
// and moves to the dead letters are driven by timers of the Queue's Clock
// (ManualClock in tests), not by the next call.
//
// # Errors
//
// ErrNotInFlight: Delete, ChangeVisibility or Release of a message not
// handed out (or no longer in flight). ErrStaleReceipt (wrapping
// ErrNotInFlight): ReleaseReceipt or ChangeVisibilityReceipt with the
// Receipt of a delivery the message has had another one after (see
// Receipt; a stale DeleteReceipt deletes). ErrNoDeadLetters: Redrive of a queue
// without a dead-letter queue. ErrNotQueue: Stat or Messages of a
// directory that holds no queue. From the engine, wrapped with context:
// ErrClosed after Close, ErrLocked for a directory another queue has open,
// ErrBadOptions for options out of range, ErrInvalidAttrs for send options
// out of range, ErrTooLarge for a body over the limit, ErrCorrupt for a
// damaged record (handed out with its Offset so that it can be deleted).
package queue
