// Package sparseidx reads and writes the fixed-width entries of a segment's
// sparse indexes over a []byte: a memory-mapped index file, or a heap buffer
// when an index is rebuilt in memory. Lookups go through warmsearch, so a
// lookup of a recent record touches only the warm last 8 KiB of the index.
//
// # Format
//
// All integers are big-endian; entries are decoded with encoding/binary,
// never by laying a Go struct over the bytes.
//
// Offset index (<base>.index), OffsetEntrySize = 8 bytes per entry:
//
//	byte  size  field
//	0     4     rel  uint32: the record's offset minus the segment's base offset
//	4     4     pos  uint32: the record's byte position in the segment
//
// Time index (<base>.timeindex), TimeEntrySize = 12 bytes per entry, written
// at the same moment as each offset-index entry:
//
//	byte  size  field
//	0     8     ms   int64: append time, Unix milliseconds, never decreasing
//	8     4     rel  uint32: the same relative offset as the offset entry
//
// Entries are sparse (see Spacer): a record gets an entry when more than
// IndexIntervalBytes were written since the previous entry, and the first
// record of a segment never gets one. So rel 0 and pos 0 never occur in an
// entry, and a zero entry marks the zero-filled end of a preallocated index.
// Valid counts the leading entries that obey these rules (rel strictly
// increasing, pos strictly increasing and inside the segment, ms never
// decreasing); an index is a cache of the log and is rebuilt when damaged.
//
// # Safety
//
// No method reads or writes outside Buf and none panics on arbitrary bytes:
// an index i outside [0, Cap()) reads as a zero entry, Put reports
// io.ErrShortBuffer, and a count n larger than Cap() is treated as Cap().
// Lookups on entries that are not sorted (damaged data not cut off by
// Valid) return a meaningless index in range, never a panic.
//
// # Concurrency
//
// Offsets and Times are small values holding a slice; they hold no other
// state. Any number of readers may call Entry, Floor, FloorRel and
// FirstAtOrAfter concurrently with one writer calling Put, as long as the
// writer publishes the entry count n only after writing the entries (for
// example with an atomic.Int64 store after Put) and readers pass the n they
// loaded: readers then only read entries [0, n), which no longer change.
// Valid reads the whole buffer and must not run concurrently with Put; it is
// meant for opening and recovering a segment. The slice must stay mapped
// while any reader uses it.
package sparseidx
