// Package inflight holds a queue's in-memory state between head and cursor:
// the in-flight table with its deadlines, the ready-again list, and the done
// marks that let the head advance.
//
// Messages are named by their uint64 offset in the log. The engine's queue
// has three positions: end (the next send), cursor (the oldest offset never
// handed out) and head (the oldest offset not yet deleted). A Table tracks
// every offset in [head, cursor), each in exactly one state:
//
//	state      meaning                                          left by
//	in flight  handed out, deadline not yet expired             Expire, Done
//	ready      its deadline passed (or restored at open);       PopReady, Done
//	           waits to be handed out again
//	done       deleted; kept as one bit until the head passes   (head advance)
//
// Offsets below head count as done. Offsets at or above the cursor are not
// handed out ("unknown"), except those registered ahead of the cursor while
// state is rebuilt at open (see Restore below).
//
// # Operations
//
// Add hands out the message at the cursor (receives = 1). Expire moves every
// in-flight message whose deadline is <= now to the ready-again list;
// NextDeadline tells the engine how long it may sleep. PopReady hands out the
// ready-again message with the lowest offset again, with a new deadline and
// receives+1. Done deletes a message in flight or ready-again (a late
// acknowledgement deletes it too) and reports the state it was in; for an
// offset never handed out it returns ErrUnknown, for one already done it
// returns StateDone and a nil error, so that deletes are idempotent.
//
// # Restore
//
// At open the engine rebuilds the table from the log and the delete log:
//
//	t := inflight.New(head)
//	t.MarkDone(off)           // every deleted offset >= head, any order
//	t.AddReady(off, receives) // optional: known receive counts, any order
//	t.SetCursor(cursor)       // every other offset in [head, cursor) becomes
//	                          // ready-again with receives 0
//
// Until SetCursor is called, Add returns ErrOrder.
//
// # Time
//
// The package never reads a clock. Deadlines and "now" are int64 Unix
// nanoseconds passed in by the caller; a deadline d has passed at now when
// d <= now.
//
// # Concurrency
//
// A Table is not safe for concurrent use. The engine calls it under the
// queue's mutex; no method blocks, does I/O or retains its arguments.
//
// # Layout and cost
//
// Offsets are grouped in chunks of 64. A ring of chunk records (24 bytes per
// 64 offsets) covers [head, cursor): two bitmaps say which offsets are done
// and which are live (in flight or ready), and a chunk with a live offset owns
// a block of 64 eight-byte slots {heap position, receives} from a reused pool.
// A chunk whose offsets are all done or unset gives its block back, so a long
// range that is mostly done costs about 0.4 bytes per offset plus 512 bytes
// per chunk that still holds a live offset. In-flight messages sit in an
// index-based binary min-heap by deadline, ready-again messages in one by
// offset; each heap entry is 16 bytes and each slot records its position in
// its heap, so any message can be removed in O(log n). About 26 bytes per
// in-flight message in all when offsets are dense.
//
//	Add, PopReady, Done       O(log n)
//	Expire                    O(k log n) for k of n expiring; O(n) rebuild
//	                          when k > n/16 (visits only the k expired)
//	Get, NextDeadline, Head   O(1)
//	head advance              amortized O(1) per done message
//
// In steady state (the heaps, the slot pool and the ring have reached their
// peak size) no method allocates. Memory is not returned after a peak.
// Slots are indexed by int32: at most 2^25 chunks can hold live messages at
// once (2^31 messages when dense); beyond that the table panics.
package inflight
