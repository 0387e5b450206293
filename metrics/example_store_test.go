package metrics_test

import (
	"log"
	"os"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/metrics"
	"github.com/pagelog/pagelog/queue"
	"github.com/prometheus/client_golang/prometheus"
)

// tempDir returns a new directory for an example, and its removal.
func tempDir() (string, func()) {
	dir, err := os.MkdirTemp("", "pagelog-metrics-example")
	if err != nil {
		log.Fatal(err)
	}
	return dir, func() { os.RemoveAll(dir) }
}

// A store's collector exports its totals (and, with PerQueue, a series
// per queue); its shared message log's figures come labelled log=name.
func ExampleNewStoreCollector() {
	dir, remove := tempDir()
	defer remove()
	s, err := queue.OpenStore(dir, queue.StoreOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.NewStoreCollector(s, "tenants", metrics.StoreOptions{})); err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"acme", "globex"} {
		q, err := s.Queue(name)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := q.Send([]byte("welcome")); err != nil {
			log.Fatal(err)
		}
	}
	printMetrics(reg, "pagelog_store_queues", "pagelog_store_messages", "pagelog_appends_total")
	// Output:
	// pagelog_appends_total{log="tenants"} 2
	// pagelog_store_messages{store="tenants"} 2
	// pagelog_store_queues{store="tenants"} 2
}

// A log's collector reads Log.Stats at each scrape: no goroutine, no state.
func ExampleNewLogCollector() {
	dir, remove := tempDir()
	defer remove()
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.NewLogCollector(l, "events")); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if _, err := l.Append([]byte("event")); err != nil {
			log.Fatal(err)
		}
	}
	printMetrics(reg, "pagelog_appends_total", "pagelog_next_offset")
	// Output:
	// pagelog_appends_total{log="events"} 3
	// pagelog_next_offset{log="events"} 3
}
