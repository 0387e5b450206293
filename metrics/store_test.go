package metrics_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/metrics"
	"github.com/pagelog/pagelog/queue"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// openStoreWith opens a store with n queues, queue i holding i messages,
// and one of them handed out from the deepest.
func openStoreWith(t *testing.T, n int) *queue.Store {
	t.Helper()
	s, err := queue.OpenStore(t.TempDir(), queue.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i := range n {
		q, err := s.Queue(fmt.Sprintf("q%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		for range i {
			if _, err := q.Send([]byte("m")); err != nil {
				t.Fatal(err)
			}
		}
		if i == n-1 {
			if _, ok, err := q.TryReceive(); !ok || err != nil {
				t.Fatalf("receive: %v %v", ok, err)
			}
		}
	}
	return s
}

func TestStoreCollectorExportsTotalsAndTheDeepestQueues(t *testing.T) {
	n := queue.StoreStatsDeepest + 2
	s := openStoreWith(t, n)
	c := metrics.NewStoreCollector(s, "main", metrics.StoreOptions{})
	want := `
# HELP pagelog_store_in_flight_messages Messages handed out and not deleted, over the open queues.
# TYPE pagelog_store_in_flight_messages gauge
pagelog_store_in_flight_messages{store="main"} 1
# HELP pagelog_store_messages Messages not deleted, over every queue of the store.
# TYPE pagelog_store_messages gauge
pagelog_store_messages{store="main"} 66
# HELP pagelog_store_queues Queues in the store.
# TYPE pagelog_store_queues gauge
pagelog_store_queues{store="main"} 12
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"pagelog_store_queues", "pagelog_store_messages", "pagelog_store_in_flight_messages"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.CollectAndCount(c, "pagelog_store_deepest_queue_messages"); got != queue.StoreStatsDeepest {
		t.Fatalf("%d deepest-queue series, want %d", got, queue.StoreStatsDeepest)
	}
	if got := testutil.CollectAndCount(c, "pagelog_store_queue_messages", "pagelog_store_queue_in_flight_messages"); got != 0 {
		t.Fatalf("%d per-queue series without PerQueue", got)
	}
	if got := testutil.CollectAndCount(c, "pagelog_next_offset"); got != 1 {
		t.Fatalf("%d message-log series, want 1", got)
	}
}

func TestStoreCollectorLabelsEveryQueueOnlyWhenAsked(t *testing.T) {
	n := queue.StoreStatsDeepest + 2
	s := openStoreWith(t, n)
	c := metrics.NewStoreCollector(s, "main", metrics.StoreOptions{PerQueue: true})
	if got := testutil.CollectAndCount(c, "pagelog_store_queue_messages"); got != n {
		t.Fatalf("%d per-queue series, want %d", got, n)
	}
	want := fmt.Sprintf(`
# HELP pagelog_store_queue_in_flight_messages Messages handed out and not deleted of each open queue of the store.
# TYPE pagelog_store_queue_in_flight_messages gauge
%s`, func() string {
		var b strings.Builder
		for i := range n {
			inFlight := 0
			if i == n-1 {
				inFlight = 1
			}
			fmt.Fprintf(&b, "pagelog_store_queue_in_flight_messages{queue=\"q%02d\",store=\"main\"} %d\n", i, inFlight)
		}
		return b.String()
	}())
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pagelog_store_queue_in_flight_messages"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}
