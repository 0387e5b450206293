package queue

import (
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// BenchmarkStoreQueueCycle is BenchmarkQueueCycle on the one queue of a
// Store (kind=store), beside the same cycle on a queue that owns its
// directory (kind=queue), in the same run: what the shared logs and the
// views cost a single queue. Target: kind=store within 10% of kind=queue.
func BenchmarkStoreQueueCycle(b *testing.B) {
	b.Run("kind=queue", BenchmarkQueueCycle)
	b.Run("kind=store", func(b *testing.B) {
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
	})
}
