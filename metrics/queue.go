package metrics

import (
	"github.com/pagelog/pagelog/queue"
	"github.com/prometheus/client_golang/prometheus"
)

// NewQueueCollector returns a collector of q's figures (Queue.Stats, read
// at each scrape), every metric labelled queue=name. See the package doc
// for the metrics.
func NewQueueCollector(q *queue.Queue, name string) prometheus.Collector {
	f := newFigures[queue.Stats]("queue", name)
	f.gauge("pagelog_queue_depth", "Messages not deleted, in every state.",
		func(s *queue.Stats) float64 { return float64(s.Messages) })
	f.gauge("pagelog_queue_ready_again_messages", "Ready messages that were handed out before (their deadline passed).",
		func(s *queue.Stats) float64 { return float64(s.ReadyAgain) })
	f.gauge("pagelog_queue_end_offset", "Offset of the next send.",
		func(s *queue.Stats) float64 { return float64(s.End) })
	f.gauge("pagelog_queue_head_offset", "Oldest message not deleted.",
		func(s *queue.Stats) float64 { return float64(s.Head) })
	f.gauge("pagelog_queue_cursor_offset", "Oldest message the queue has not looked at since it was opened.",
		func(s *queue.Stats) float64 { return float64(s.Cursor) })
	f.gauge("pagelog_queue_checkpointed_offset", "Head written in queue.head.",
		func(s *queue.Stats) float64 { return float64(s.Checkpointed) })
	f.gauge("pagelog_queue_oldest_message_age_seconds", "Age of the oldest message not deleted (0 when there is none).",
		func(s *queue.Stats) float64 { return s.OldestAge.Seconds() })
	f.gauge("pagelog_queue_dead_letters", "Messages in the dead-letter queue not deleted.",
		func(s *queue.Stats) float64 { return float64(s.DeadLetters) })
	f.gauge("pagelog_queue_groups", "Ordering groups with messages the queue knows of.",
		func(s *queue.Stats) float64 { return float64(s.Groups) })
	f.gauge("pagelog_queue_groups_waiting", "Ordering groups with a message waiting behind an earlier one.",
		func(s *queue.Stats) float64 { return float64(s.GroupsWaiting) })
	f.gauge("pagelog_queue_dedup_ids", "Deduplication ids remembered.",
		func(s *queue.Stats) float64 { return float64(s.DedupIDs) })
	f.counter("pagelog_queue_sent_total", "Messages sent since the queue was opened.",
		func(s *queue.Stats) uint64 { return s.Sent })
	f.counter("pagelog_queue_received_total", "Messages handed out since the queue was opened, redeliveries included.",
		func(s *queue.Stats) uint64 { return s.Received })
	f.counter("pagelog_queue_redelivered_total", "Hand-outs of a message that was handed out before, since the queue was opened.",
		func(s *queue.Stats) uint64 { return s.Redelivered })
	f.counter("pagelog_queue_deleted_total", "Messages deleted since the queue was opened.",
		func(s *queue.Stats) uint64 { return s.Deleted })
	f.counter("pagelog_queue_dead_lettered_total", "Messages moved to the dead letters since the queue was opened.",
		func(s *queue.Stats) uint64 { return s.DeadLettered })
	f.counter("pagelog_queue_redriven_total", "Dead letters moved back into the queue since it was opened.",
		func(s *queue.Stats) uint64 { return s.Redriven })
	f.gauge("pagelog_queue_checkpoint_failed", "1 when the last write of queue.head failed.",
		func(s *queue.Stats) float64 { return flag(s.CheckpointError != nil) })
	f.gauge("pagelog_queue_dead_letter_move_failed", "1 when the last move to the dead letters failed.",
		func(s *queue.Stats) float64 { return flag(s.MoveError != nil) })
	return &queueCollector{q: q, f: f, log: newLogFigures("log", name), messages: f.desc("pagelog_queue_messages",
		"Messages not deleted, by state (they add up to pagelog_queue_depth).", "state")}
}

type queueCollector struct {
	q        *queue.Queue
	f        *figures[queue.Stats]
	messages *prometheus.Desc
	log      logFigures // the message log's, labelled log=<name>
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	c.f.describe(ch)
	ch <- c.messages
	c.log.describe(ch)
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.q.Stats()
	c.f.collect(ch, &st)
	c.log.collect(ch, &st.Log)
	for _, s := range messageStates(&st) {
		ch <- constMetric(c.messages, prometheus.GaugeValue, float64(s.n), s.state)
	}
}

type stateCount struct {
	state string
	n     uint64
}

// messageStates splits Stats.Messages by state. The messages the queue has
// not looked at yet count as ready.
func messageStates(st *queue.Stats) []stateCount {
	known := []stateCount{
		{"in_flight", uint64(st.InFlight)},
		{"delayed", uint64(st.Delayed)},
		{"waiting", uint64(st.Waiting)},
		{"dying", uint64(st.Dying)},
	}
	ready := st.Messages
	for _, s := range known {
		ready -= min(ready, s.n)
	}
	return append([]stateCount{{"ready", ready}}, known...)
}
