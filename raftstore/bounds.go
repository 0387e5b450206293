package raftstore

import (
	"encoding/binary"
	"fmt"
	"math"
)

// raft.bounds: what the store has deleted that the log's segment files may
// still hold (FORMAT.md, "Raft entries").
//
// On-disk format: never change, bump boundsVersion instead.
//
//	byte  size  field
//	0     1     version (1)
//	1     8     first (uint64): every entry below it is deleted
//	9     8     cut (uint64): every entry at or above it is deleted
//	            (2^64-1: none); set only while a suffix DeleteRange runs
//	17    4     CRC-32C of bytes 0..16
const (
	boundsName    = "raft.bounds"
	boundsVersion = 1
	boundsSize    = 21
	noCut         = math.MaxUint64
)

// bounds are the logical limits of the log: the entries it holds are those
// of the segment files in [max(log first, first), min(log next, cut)).
type bounds struct {
	first uint64
	cut   uint64
}

func (b bounds) encode() []byte {
	buf := make([]byte, 0, boundsSize)
	buf = append(buf, boundsVersion)
	buf = binary.BigEndian.AppendUint64(buf, b.first)
	buf = binary.BigEndian.AppendUint64(buf, b.cut)
	return sealed(buf)
}

func decodeBounds(b []byte) (bounds, error) {
	body, ok := unseal(b)
	switch {
	case len(b) != boundsSize:
		return bounds{}, fmt.Errorf("%w: %s: %d bytes, want %d", ErrBadFile, boundsName, len(b), boundsSize)
	case body[0] != boundsVersion:
		return bounds{}, fmt.Errorf("%w: %s: version %d, this build reads %d", ErrBadFile, boundsName, body[0], boundsVersion)
	case !ok:
		return bounds{}, fmt.Errorf("%w: %s: checksum mismatch", ErrBadFile, boundsName)
	}
	return bounds{first: binary.BigEndian.Uint64(body[1:]), cut: binary.BigEndian.Uint64(body[9:])}, nil
}
