package metrics

import (
	"github.com/pagelog/pagelog/queue"
	"github.com/prometheus/client_golang/prometheus"
)

// StoreOptions configure NewStoreCollector.
type StoreOptions struct {
	// PerQueue exports pagelog_store_queue_messages and
	// pagelog_store_queue_in_flight_messages with a label queue=NAME for
	// every queue of the store. Off by default: a series per queue is
	// what a store of many queues must not cost its Prometheus (100,000
	// queues are 200,000 series); the totals and the deepest queues are
	// exported either way.
	PerQueue bool
}

// NewStoreCollector returns a collector of s's figures (Store.Stats, and
// Store.Depths with PerQueue, read at each scrape), every metric labelled
// store=name; the store's message log's figures come labelled log=name.
// See the package doc for the metrics.
func NewStoreCollector(s *queue.Store, name string, o StoreOptions) prometheus.Collector {
	f := newFigures[queue.StoreStats]("store", name)
	f.gauge("pagelog_store_queues", "Queues in the store.",
		func(s *queue.StoreStats) float64 { return float64(s.Queues) })
	f.gauge("pagelog_store_open_queues", "Queues of the store open in this process.",
		func(s *queue.StoreStats) float64 { return float64(s.Open) })
	f.gauge("pagelog_store_messages", "Messages not deleted, over every queue of the store.",
		func(s *queue.StoreStats) float64 { return float64(s.Messages) })
	f.gauge("pagelog_store_in_flight_messages", "Messages handed out and not deleted, over the open queues.",
		func(s *queue.StoreStats) float64 { return float64(s.InFlight) })
	f.gauge("pagelog_store_checkpoint_failed", "1 when the store's last checkpoint failed.",
		func(s *queue.StoreStats) float64 { return flag(s.CheckpointError != nil) })
	c := &storeCollector{s: s, o: o, f: f, log: newLogFigures("log", name),
		deepest: f.desc("pagelog_store_deepest_queue_messages",
			"Messages not deleted of the store's deepest queues (at most queue.StoreStatsDeepest of them).", "queue")}
	if o.PerQueue {
		c.messages = f.desc("pagelog_store_queue_messages", "Messages not deleted of each queue of the store.", "queue")
		c.inFlight = f.desc("pagelog_store_queue_in_flight_messages", "Messages handed out and not deleted of each open queue of the store.", "queue")
	}
	return c
}

type storeCollector struct {
	s                  *queue.Store
	o                  StoreOptions
	f                  *figures[queue.StoreStats]
	log                logFigures // the message log's, labelled log=<name>
	deepest            *prometheus.Desc
	messages, inFlight *prometheus.Desc // nil unless PerQueue
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	c.f.describe(ch)
	ch <- c.deepest
	if c.o.PerQueue {
		ch <- c.messages
		ch <- c.inFlight
	}
	c.log.describe(ch)
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	c.f.collect(ch, &st)
	c.log.collect(ch, &st.Log)
	for _, d := range st.Deepest {
		ch <- constMetric(c.deepest, prometheus.GaugeValue, float64(d.Messages), d.Name)
	}
	if !c.o.PerQueue {
		return
	}
	for _, d := range c.s.Depths() {
		ch <- constMetric(c.messages, prometheus.GaugeValue, float64(d.Messages), d.Name)
		ch <- constMetric(c.inFlight, prometheus.GaugeValue, float64(d.InFlight), d.Name)
	}
}
