package raftstore

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
)

// raft.stable: the StableStore's keys and values (raft keeps its current
// term and its vote there).
//
// On-disk format: never change, bump stableVersion instead.
//
//	byte  size  field
//	0     1     version (1)
//	1     4     n: number of pairs (uint32)
//	5     ...   n pairs, keys in increasing byte order, each:
//	              key length K (uint32), K bytes of key,
//	              value length V (uint32), V bytes of value
//	...   4     CRC-32C of every byte before it
const (
	stableName    = "raft.stable"
	stableVersion = 1
)

func encodeStable(kv map[string][]byte) []byte {
	n := 9
	for k, v := range kv {
		n += 8 + len(k) + len(v)
	}
	b := make([]byte, 0, n)
	b = append(b, stableVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(kv)))
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		v := kv[k]
		b = binary.BigEndian.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return sealed(b)
}

func decodeStable(b []byte) (map[string][]byte, error) {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadFile, stableName, fmt.Sprintf(why, args...))
	}
	body, ok := unseal(b)
	switch {
	case len(b) < 9:
		return nil, bad("%d bytes, shorter than the smallest file (9)", len(b))
	case body[0] != stableVersion:
		return nil, bad("version %d, this build reads %d", body[0], stableVersion)
	case !ok:
		return nil, bad("checksum mismatch")
	}
	n := binary.BigEndian.Uint32(body[1:])
	rest := body[5:]
	field := func() ([]byte, bool) {
		if len(rest) < 4 {
			return nil, false
		}
		l := binary.BigEndian.Uint32(rest)
		if uint64(l) > uint64(len(rest)-4) {
			return nil, false
		}
		f := rest[4 : 4+l]
		rest = rest[4+l:]
		return f, true
	}
	kv := make(map[string][]byte, min(n, 1024))
	for i := uint32(0); i < n; i++ {
		k, ok1 := field()
		v, ok2 := field()
		if !ok1 || !ok2 {
			return nil, bad("pair %d of %d runs past the end", i, n)
		}
		if _, dup := kv[string(k)]; dup {
			return nil, bad("key %q appears twice", k)
		}
		kv[string(k)] = slices.Clone(v)
	}
	if len(rest) != 0 {
		return nil, bad("%d bytes after the last pair", len(rest))
	}
	return kv, nil
}

// Set stores val under key (raft.StableStore). It is durable when it
// returns (unless Options.NoSync): the whole file is replaced atomically.
func (s *Store) Set(key, val []byte) error {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	old, had := s.kv[string(key)]
	s.kv[string(key)] = append([]byte{}, val...)
	if err := replaceFile(s.dir, stableName, encodeStable(s.kv), s.fileMode, s.opts.NoSync); err != nil {
		if had {
			s.kv[string(key)] = old
		} else {
			delete(s.kv, string(key))
		}
		return err
	}
	return nil
}

// Get returns a copy of the value stored under key, or ErrKeyNotFound (its
// text is exactly "not found", which raft tests for).
func (s *Store) Get(key []byte) ([]byte, error) {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	v, ok := s.kv[string(key)]
	if !ok {
		return nil, ErrKeyNotFound
	}
	return append([]byte{}, v...), nil
}

// SetUint64 stores val under key as 8 big-endian bytes.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value SetUint64 stored under key, or
// ErrKeyNotFound. A value of another length than 8 bytes (one stored by
// Set) is an error.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftstore: GetUint64(%q): the value has %d bytes, not 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
