package raftstore

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// The raft entry header: the first bytes of every record body the store
// writes (FORMAT.md, "Raft entries"). The record's id is the entry's index;
// its checksum covers the header, the extensions and the data.
//
// On-disk format: never change, bump entryVersion instead.
//
//	byte  size  field
//	0     1     version (1)
//	1     1     type (raft.LogType)
//	2     8     term (uint64)
//	10    8     appended at: seconds since the Unix epoch (int64)
//	18    4     appended at: nanoseconds within the second (uint32, < 1e9)
//	22    4     extensions length E (uint32)
//	26    E     extensions
//	26+E  ...   data (the rest of the body)
const (
	entryVersion    = 1
	entryHeaderSize = 26

	offVersion = 0
	offType    = 1
	offTerm    = 2
	offSec     = 10
	offNsec    = 18
	offExtLen  = 22
)

// zeroSec is the seconds field of the zero time.Time: a zero AppendedAt
// comes back as the zero time.Time, not as a time in 0001 in some zone.
var zeroSec = time.Time{}.Unix()

// entrySize is the size of e's record body.
func entrySize(e *raft.Log) int {
	return entryHeaderSize + len(e.Extensions) + len(e.Data)
}

// encodeEntry writes e's record body into b, which must hold entrySize(e)
// bytes, and returns the bytes written.
func encodeEntry(b []byte, e *raft.Log) int {
	n := entrySize(e)
	_ = b[n-1]
	b[offVersion] = entryVersion
	b[offType] = byte(e.Type)
	binary.BigEndian.PutUint64(b[offTerm:], e.Term)
	sec, nsec := zeroSec, 0
	if !e.AppendedAt.IsZero() {
		sec, nsec = e.AppendedAt.Unix(), e.AppendedAt.Nanosecond()
	}
	binary.BigEndian.PutUint64(b[offSec:], uint64(sec))
	binary.BigEndian.PutUint32(b[offNsec:], uint32(nsec))
	binary.BigEndian.PutUint32(b[offExtLen:], uint32(len(e.Extensions)))
	copy(b[entryHeaderSize:], e.Extensions)
	copy(b[entryHeaderSize+len(e.Extensions):], e.Data)
	return n
}

// decodeEntry fills out from the record body b of the entry at index. Data
// and Extensions are copied (raft keeps them past the call) into one
// allocation; empty ones are nil. Bad bytes give an error wrapping
// ErrCorrupt, never a panic.
func decodeEntry(index uint64, b []byte, out *raft.Log) error {
	if len(b) < entryHeaderSize {
		return fmt.Errorf("%w: entry %d: body of %d bytes, shorter than the %d-byte header", ErrCorrupt, index, len(b), entryHeaderSize)
	}
	if v := b[offVersion]; v != entryVersion {
		return fmt.Errorf("%w: entry %d: header version %d (want %d)", ErrCorrupt, index, v, entryVersion)
	}
	nsec := binary.BigEndian.Uint32(b[offNsec:])
	if nsec >= 1e9 {
		return fmt.Errorf("%w: entry %d: appended-at nanoseconds %d out of range", ErrCorrupt, index, nsec)
	}
	ext := uint64(binary.BigEndian.Uint32(b[offExtLen:]))
	rest := b[entryHeaderSize:]
	if ext > uint64(len(rest)) {
		return fmt.Errorf("%w: entry %d: extensions of %d bytes in a body of %d", ErrCorrupt, index, ext, len(b))
	}
	sec := int64(binary.BigEndian.Uint64(b[offSec:]))
	out.Index = index
	out.Term = binary.BigEndian.Uint64(b[offTerm:])
	out.Type = raft.LogType(b[offType])
	out.AppendedAt = time.Time{}
	if sec != zeroSec || nsec != 0 {
		out.AppendedAt = time.Unix(sec, int64(nsec))
	}
	out.Data, out.Extensions = nil, nil
	if len(rest) == 0 {
		return nil
	}
	// One allocation for both, in their order on disk (extensions, then
	// data: one copy, and no zeroing of memory about to be overwritten),
	// each with its capacity capped so that an append to one never writes
	// into the other.
	buf := append([]byte(nil), rest...)
	if ext > 0 {
		out.Extensions = buf[:ext:ext]
	}
	if uint64(len(buf)) > ext {
		out.Data = buf[ext:]
	}
	return nil
}
