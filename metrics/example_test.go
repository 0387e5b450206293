package metrics_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/metrics"
	"github.com/pagelog/pagelog/queue"
	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics registers the collectors of a service's log and queue
// (and of the queue's dead letters, when it has them) with reg:
// prometheus.DefaultRegisterer in most services, whose /metrics is
// promhttp.Handler().
func registerMetrics(reg prometheus.Registerer, events *engine.Log, jobs *queue.Queue) error {
	cs := []prometheus.Collector{
		metrics.NewLogCollector(events, "events"),
		metrics.NewQueueCollector(jobs, "jobs"),
	}
	if dead := jobs.DeadLetter(); dead != nil {
		cs = append(cs, metrics.NewQueueCollector(dead, "jobs.dead"))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// A service registers its collectors once; each scrape reads Log.Stats
// and Queue.Stats.
func ExampleNewQueueCollector() {
	dir, err := os.MkdirTemp("", "pagelog-metrics-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	events, err := engine.Open(filepath.Join(dir, "events"), engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer events.Close()
	jobs, err := queue.Open(filepath.Join(dir, "jobs"), queue.Options{MaxReceives: 5})
	if err != nil {
		log.Fatal(err)
	}
	defer jobs.Close()

	reg := prometheus.NewRegistry()
	if err := registerMetrics(reg, events, jobs); err != nil {
		log.Fatal(err)
	}
	for _, body := range []string{"resize photo 1", "resize photo 2"} {
		if _, err := jobs.Send([]byte(body)); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := events.Append([]byte("user 7 signed in")); err != nil {
		log.Fatal(err)
	}
	printMetrics(reg, "pagelog_appends_total", "pagelog_queue_depth", "pagelog_queue_sent_total")
	// Output:
	// pagelog_appends_total{log="events"} 1
	// pagelog_appends_total{log="jobs"} 2
	// pagelog_appends_total{log="jobs.dead"} 0
	// pagelog_queue_depth{queue="jobs"} 2
	// pagelog_queue_depth{queue="jobs.dead"} 0
	// pagelog_queue_sent_total{queue="jobs"} 2
	// pagelog_queue_sent_total{queue="jobs.dead"} 0
}

// printMetrics prints the samples of the named gauges and counters.
func printMetrics(g prometheus.Gatherer, names ...string) {
	mfs, err := g.Gather()
	if err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if !contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.Metric {
			l := m.Label[0]
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			lines = append(lines, fmt.Sprintf("%s{%s=%q} %v", mf.GetName(), l.GetName(), l.GetValue(), v))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
