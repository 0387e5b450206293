package metrics_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/metrics"
	"github.com/pagelog/pagelog/queue"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func openQueue(t testing.TB, dir string, opts queue.Options) *queue.Queue {
	t.Helper()
	q, err := queue.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// receiveAll hands out every ready message and returns their offsets.
func receiveAll(t testing.TB, q *queue.Queue) []uint64 {
	t.Helper()
	var got []uint64
	for {
		m, ok, err := q.TryReceive()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		got = append(got, m.Offset)
	}
}

// messagesText is the exposition of pagelog_queue_messages of queue q.
func messagesText(ready, inFlight, delayed, waiting, dying int) string {
	return fmt.Sprintf(`
# HELP pagelog_queue_messages Messages not deleted, by state (they add up to pagelog_queue_depth).
# TYPE pagelog_queue_messages gauge
pagelog_queue_messages{queue="jobs",state="delayed"} %d
pagelog_queue_messages{queue="jobs",state="dying"} %d
pagelog_queue_messages{queue="jobs",state="in_flight"} %d
pagelog_queue_messages{queue="jobs",state="ready"} %d
pagelog_queue_messages{queue="jobs",state="waiting"} %d
`, delayed, dying, inFlight, ready, waiting)
}

// A known workload on a queue with a manual clock: plain, delayed and
// grouped sends, hand-outs, deletes, deadlines that pass, redeliveries,
// moves to the dead letters and a redrive, with the figures after each
// step.
func TestQueueCollectorAfterWorkload(t *testing.T) {
	start := time.Now()
	clk := queue.NewManualClock(start)
	dir := filepath.Join(t.TempDir(), "jobs")
	q := openQueue(t, dir, queue.Options{Clock: clk, Visibility: 10 * time.Second, MaxReceives: 2})
	// Offsets 0-9, of 1 KiB: the time index, which gives the oldest
	// message's age, has an entry per 4 KiB of records.
	for i := range 10 {
		if _, err := q.Send([]byte(fmt.Sprintf("m%1023d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // 10, 11: due in an hour
		if _, err := q.SendWith([]byte("later"), queue.SendOptions{Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // 12, 13, 14: one group, handed out one at a time
		if _, err := q.SendWith([]byte("g"), queue.SendOptions{Group: "g"}); err != nil {
			t.Fatal(err)
		}
	}
	c := metrics.NewQueueCollector(q, "jobs")
	// Nothing looked at yet: every message counts as ready.
	if err := testutil.CollectAndCompare(c, strings.NewReader(messagesText(15, 0, 0, 0, 0)), "pagelog_queue_messages"); err != nil {
		t.Error(err)
	}

	for range 5 { // hands out 0-4
		if _, ok, err := q.TryReceive(); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	for _, off := range []uint64{0, 1} {
		if err := q.Delete(off); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(11 * time.Second) // 2, 3 and 4 are ready again
	if m, ok, err := q.TryReceive(); !ok || err != nil || m.Offset != 2 || m.Receives != 2 {
		t.Fatalf("receive after the deadline: %+v %v %v", m, ok, err)
	}
	// 3 and 4 again, then 5-9 and the group's first; 10 and 11 are
	// delayed, 13 and 14 wait behind 12.
	if got := fmt.Sprint(receiveAll(t, q)); got != "[3 4 5 6 7 8 9 12]" {
		t.Fatalf("handed out %s", got)
	}
	if err := q.Delete(5); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(messagesText(0, 8, 2, 2, 0)), "pagelog_queue_messages"); err != nil {
		t.Error(err)
	}
	mfs := gather(t, c)
	expectValues(t, mfs, map[string]float64{
		"pagelog_queue_depth": 12, "pagelog_queue_ready_again_messages": 0,
		"pagelog_queue_end_offset": 15, "pagelog_queue_head_offset": 2, "pagelog_queue_cursor_offset": 15,
		"pagelog_queue_groups": 1, "pagelog_queue_groups_waiting": 1,
		"pagelog_queue_sent_total": 15, "pagelog_queue_received_total": 14,
		"pagelog_queue_redelivered_total": 3, "pagelog_queue_deleted_total": 3,
		"pagelog_queue_dead_lettered_total": 0, "pagelog_queue_dead_letters": 0,
	})

	// The deadlines pass again: 2, 3 and 4 were received twice and move to
	// the dead letters; 6-9 and 12 are ready again.
	clk.Advance(11 * time.Second)
	waitFor(t, func() bool { return q.Stats().DeadLettered == 3 })
	if err := testutil.CollectAndCompare(c, strings.NewReader(messagesText(5, 0, 2, 2, 0)), "pagelog_queue_messages"); err != nil {
		t.Error(err)
	}
	mfs = gather(t, c)
	expectValues(t, mfs, map[string]float64{
		"pagelog_queue_depth": 9, "pagelog_queue_ready_again_messages": 5,
		"pagelog_queue_head_offset": 6, "pagelog_queue_end_offset": 15,
		"pagelog_queue_dead_lettered_total": 3, "pagelog_queue_dead_letters": 3,
		"pagelog_queue_deleted_total": 3, "pagelog_queue_redriven_total": 0,
		"pagelog_queue_checkpoint_failed": 0, "pagelog_queue_dead_letter_move_failed": 0,
		"pagelog_queue_dedup_ids": 0,
	})
	// The head message was sent during this test: its age is the wall
	// time since (the time index is stamped by the system clock).
	if age := value(t, mfs, "pagelog_queue_oldest_message_age_seconds"); age <= 0 || age > time.Since(start).Seconds()+0.002 {
		t.Errorf("oldest message age %v s, test running for %v", age, time.Since(start))
	}

	// The dead-letter queue is a queue of its own.
	dead := gather(t, metrics.NewQueueCollector(q.DeadLetter(), "jobs.dead"))
	expectValues(t, dead, map[string]float64{"pagelog_queue_depth": 3, "pagelog_queue_sent_total": 3})

	if n, err := q.Redrive(1); n != 1 || err != nil {
		t.Fatalf("Redrive: %d, %v", n, err)
	}
	expectValues(t, gather(t, c), map[string]float64{
		"pagelog_queue_redriven_total": 1, "pagelog_queue_dead_letters": 2,
		"pagelog_queue_depth": 10, "pagelog_queue_end_offset": 16, "pagelog_queue_sent_total": 16,
	})

	// Deduplication ids are remembered for the window.
	for range 2 {
		if _, err := q.SendWith([]byte("once"), queue.SendOptions{DedupID: "order-1"}); err != nil {
			t.Fatal(err)
		}
	}
	expectValues(t, gather(t, c), map[string]float64{"pagelog_queue_dedup_ids": 1, "pagelog_queue_depth": 11})
}

// waitFor waits until cond holds (what the queue does in the background),
// for at most a minute (a hang).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

// A scrape of a closed queue answers from its last state.
func TestQueueCollectorClosed(t *testing.T) {
	q, err := queue.Open(t.TempDir(), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := q.Send([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := metrics.NewQueueCollector(q, "jobs")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	expectValues(t, gather(t, c), map[string]float64{
		"pagelog_queue_depth": 4, "pagelog_queue_sent_total": 4, "pagelog_queue_received_total": 1,
	})
}

// The names follow Prometheus' conventions (testutil's linter: base
// units, _total on counters, help on every metric), and each collector
// exports what the package doc lists.
func TestCollectorsLint(t *testing.T) {
	l := openLog(t, t.TempDir(), engine.Options{})
	q := openQueue(t, t.TempDir(), queue.Options{})
	for _, c := range []struct {
		c    prometheus.Collector
		want int
	}{
		{metrics.NewLogCollector(l, "lint"), 20},   // 19 gauges and counters, the sync histogram
		{metrics.NewQueueCollector(q, "lint"), 44}, // 19 gauges and counters, 5 message states, the message log's 20
	} {
		problems, err := testutil.CollectAndLint(c.c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
		if n := testutil.CollectAndCount(c.c); n != c.want {
			t.Errorf("%d metrics, want %d", n, c.want)
		}
	}
}

// A log and two queue collectors on one registry, as a service registers
// them, with Go's and the process's collectors beside: no clash, and each
// queue told apart by its label.
func TestCollectorsTogether(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	q := openQueue(t, t.TempDir(), queue.Options{})
	l := openLog(t, t.TempDir(), engine.Options{})
	reg.MustRegister(metrics.NewQueueCollector(q, "jobs"), metrics.NewLogCollector(l, "events"),
		metrics.NewQueueCollector(q, "jobs-again"),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	queues := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() == "pagelog_queue_depth" {
			for _, m := range mf.Metric {
				queues[m.Label[0].GetValue()] = true
			}
		}
	}
	if len(queues) != 2 || !queues["jobs"] || !queues["jobs-again"] {
		t.Errorf("pagelog_queue_depth for %v", queues)
	}
}
