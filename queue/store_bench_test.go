package queue

import (
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// BenchmarkStoreQueueCycle is BenchmarkQueueCycle on the one queue of a
// Store: what the shared logs and the views cost a single queue. Target:
// within 10% of BenchmarkQueueCycle.
func BenchmarkStoreQueueCycle(b *testing.B) {
	s, err := OpenStore(b.TempDir(), StoreOptions{Log: engine.Options{Sync: engine.SyncNone}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	q, err := s.Queue("cycle")
	if err != nil {
		b.Fatal(err)
	}
	cycle(b, q, make([]byte, 1024))
}
