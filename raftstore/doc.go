// Package raftstore is a hashicorp/raft LogStore and StableStore on a
// pagelog log.
//
// A Store keeps raft's entries as the records of a pagelog log (raft index
// = record offset) and raft's term and vote in a small file beside it:
//
//	dir/LOCK          flock held while the store is open
//	dir/log/          the log: segments, indexes, log.meta (FORMAT.md)
//	dir/raft.bounds   the first entry kept, and a suffix cut under way
//	dir/raft.stable   the StableStore's keys and values
//	dir/raft.node     the node id the term and vote belong to (SetNodeID)
//
// Each entry is one record whose body is a 26-byte header (version, type,
// term, append time, extensions length), the extensions, then the data;
// the record's CRC-32C covers all of it (FORMAT.md, "Raft entries").
//
// # Durability
//
// StoreLogs returns once its entries are on disk: the log runs SyncAlways,
// and a batch is one append and one fdatasync. DeleteRange, Set and
// SetUint64 are durable when they return too. Options.NoSync turns every
// sync off, for tests: a power failure may then take acknowledged entries,
// or raft's vote, which raft cannot survive.
//
// A suffix DeleteRange (a follower dropping conflicting entries) records
// its cut in raft.bounds before the log's Truncate runs; a crash at any
// point leaves all the entries or the cut applied (Open finishes it),
// never a part, and never loses an entry below the cut. A prefix
// DeleteRange (compaction) records the new first index, then drops the
// log's whole segments below it; the entries left below it in the first
// kept segment are never served again.
//
// # Concurrency and lifetimes
//
// Every method is safe for concurrent use. Reads (GetLog, FirstIndex,
// LastIndex) take no lock and never wait for a writer; StoreLogs and
// DeleteRange are serialized, as are the StableStore's calls. GetLog
// copies the entry's data and extensions out of the log's mapping (raft
// keeps them): the caller owns them. Calls after Close return ErrClosed.
package raftstore
