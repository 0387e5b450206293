// Package segment is one segment of a pagelog log: the record file
// (<base>.log), its sparse offset index (<base>.index) and its time index
// (<base>.timeindex), as ../../FORMAT.md describes them.
//
// A segment is either active (the one the writer appends to: preallocated
// with fallocate, mapped twice, once writable for the writer and once
// read-only for readers) or sealed (trimmed to the exact size of its records,
// mapped read-only, never changed again).
//
// # Concurrency
//
// One writer (the engine serializes Append) and any number of readers. The
// writer puts a record's bytes in place, then its index entries, then
// publishes the new end position and next offset with atomic stores; a
// reader loads those first and never looks past them, so it never sees a
// partly written record.
//
// # Lifetimes
//
// A segment is reference counted. The log owns one reference; every record
// handed to a caller owns another until it is released. The mappings are
// unmapped only when the last reference is dropped, so a slice returned by
// Read stays valid, even after the log closed or dropped the segment, until
// it is released.
package segment
