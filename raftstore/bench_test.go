package raftstore

import (
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkGetLog reads one of the 64 most recent of 4096 entries of 1 KiB
// (the peer comparison is in bench/peers).
func BenchmarkGetLog(b *testing.B) {
	s := openTest(b, b.TempDir(), Options{NoSync: true})
	const n = 4096
	for from := uint64(1); from <= n; from += 256 {
		logs := make([]*raft.Log, 256)
		for i := range logs {
			logs[i] = &raft.Log{Index: from + uint64(i), Term: 1, Data: make([]byte, 1024)}
		}
		mustStore(b, s, logs)
	}
	var e raft.Log
	b.SetBytes(1024)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := s.GetLog(n-uint64(i%64), &e); err != nil {
			b.Fatal(err)
		}
	}
}
