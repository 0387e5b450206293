package peers

// BenchmarkLogStore: raftstore beside hashicorp/raft-wal and
// hashicorp/raft-boltdb as raft's LogStore, in one run, each with its
// defaults and its fsync (raftstore: SyncAlways, 64 MiB segments;
// raft-wal: 64 MiB segments, an fsync per StoreLogs; raft-boltdb: a bbolt
// transaction committed with its fsync per call):
//
//	op=StoreLogs/batch=1, batch=64   1 KiB entries, one StoreLogs per op
//	op=GetLog                        a recent entry (one of the last 64 of
//	                                 4096), into a fresh raft.Log
//	op=DeleteRange                   the oldest 256 entries of a window of
//	                                 4096 (256 entries are appended before
//	                                 each op, outside the timer)
//
// Run it on a quiet machine:
//
//	cd bench/peers && go test -run '^$' -bench LogStore -benchmem -count=10 . | tee logstore.txt
//	benchstat -col /store logstore.txt
//
// The timed ops report p50, p99, p99.9, p99.99 and max (StoreLogs and
// DeleteRange) besides ns/op, and entries/s for StoreLogs.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/pagelog/pagelog/raftstore"
)

type logStore interface {
	raft.LogStore
	Close() error
}

var logStores = []struct {
	name string
	open func(dir string) (logStore, error)
}{
	{"raftstore", func(dir string) (logStore, error) { return raftstore.Open(dir, raftstore.Options{}) }},
	{"raft-wal", func(dir string) (logStore, error) {
		return raftwal.Open(dir, raftwal.WithLogger(hclog.NewNullLogger()))
	}},
	{"raft-boltdb", func(dir string) (logStore, error) {
		return raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	}},
}

const entryBytes = 1024

func entryBody(idx uint64) []byte {
	b := bytes.Repeat([]byte{byte(idx)}, entryBytes)
	copy(b, fmt.Sprintf("entry %d", idx))
	return b
}

func entries(from uint64, n int) []*raft.Log {
	out := make([]*raft.Log, n)
	for i := range out {
		idx := from + uint64(i)
		out[i] = &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: entryBody(idx), AppendedAt: time.Now()}
	}
	return out
}

func openLogStore(b *testing.B, open func(string) (logStore, error)) logStore {
	b.Helper()
	dir, err := os.MkdirTemp(os.Getenv("LOGSTORE_DIR"), "logstore-")
	if err != nil {
		b.Fatal(err)
	}
	s, err := open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = s.Close()
		_ = os.RemoveAll(dir)
	})
	return s
}

// latencies collects the duration of each timed op.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	at := func(q float64) float64 {
		return float64(l[min(len(l)-1, int(q*float64(len(l))))].Nanoseconds())
	}
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
	b.ReportMetric(at(0.999), "p99.9-ns")
	b.ReportMetric(at(0.9999), "p99.99-ns")
	b.ReportMetric(float64(l[len(l)-1].Nanoseconds()), "max-ns")
}

func BenchmarkLogStore(b *testing.B) {
	for _, st := range logStores {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("store=%s/op=StoreLogs/batch=%d", st.name, batch), func(b *testing.B) {
				benchStoreLogs(b, openLogStore(b, st.open), batch)
			})
		}
		b.Run(fmt.Sprintf("store=%s/op=GetLog", st.name), func(b *testing.B) {
			benchGetLog(b, openLogStore(b, st.open))
		})
		b.Run(fmt.Sprintf("store=%s/op=DeleteRange", st.name), func(b *testing.B) {
			benchDeleteRange(b, openLogStore(b, st.open))
		})
	}
}

func benchStoreLogs(b *testing.B, s logStore, batch int) {
	// The batches are built before the timer: the stores, not the test,
	// are measured. 64 distinct batches are cycled, their indexes updated.
	const distinct = 64
	batches := make([][]*raft.Log, distinct)
	for i := range batches {
		batches[i] = entries(uint64(1+i*batch), batch)
	}
	lat := make(latencies, 0, b.N)
	next := uint64(1)
	var last *raft.Log
	b.SetBytes(int64(batch * entryBytes))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		logs := batches[i%distinct]
		for j, e := range logs {
			e.Index = next + uint64(j)
		}
		start := time.Now()
		if err := s.StoreLogs(logs); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		next += uint64(batch)
		last = logs[batch-1]
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
	lat.report(b)
	checkEntry(b, s, last)
}

func benchGetLog(b *testing.B, s logStore) {
	const n = 4096
	var stored []*raft.Log
	for from := uint64(1); from <= n; from += 256 {
		batch := entries(from, 256)
		if err := s.StoreLogs(batch); err != nil {
			b.Fatal(err)
		}
		stored = append(stored, batch...)
	}
	b.SetBytes(entryBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var e raft.Log
		if err := s.GetLog(n-uint64(i%64), &e); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	checkEntry(b, s, stored[n-5])
}

func benchDeleteRange(b *testing.B, s logStore) {
	const window, step = 4096, 256
	for from := uint64(1); from <= window; from += step {
		if err := s.StoreLogs(entries(from, step)); err != nil {
			b.Fatal(err)
		}
	}
	first, next := uint64(1), uint64(window+1)
	batch := entries(next, step)
	lat := make(latencies, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for j, e := range batch {
			e.Index = next + uint64(j)
		}
		if err := s.StoreLogs(batch); err != nil {
			b.Fatal(err)
		}
		next += step
		b.StartTimer()
		start := time.Now()
		if err := s.DeleteRange(first, first+step-1); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		first += step
	}
	b.StopTimer()
	lat.report(b)
	if got, err := s.FirstIndex(); err != nil || got != first {
		b.Fatalf("FirstIndex after the deletes = %d, %v; want %d", got, err, first)
	}
}

// checkEntry makes sure the store holds want.
func checkEntry(b *testing.B, s logStore, want *raft.Log) {
	b.Helper()
	var e raft.Log
	if err := s.GetLog(want.Index, &e); err != nil {
		b.Fatalf("GetLog(%d): %v", want.Index, err)
	}
	if e.Index != want.Index || e.Term != want.Term || e.Type != want.Type || !bytes.Equal(e.Data, want.Data) {
		b.Fatalf("GetLog(%d) = index %d, term %d, %d bytes: not what was stored", want.Index, e.Index, e.Term, len(e.Data))
	}
}
