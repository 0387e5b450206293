package metrics_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/metrics"
	"github.com/pagelog/pagelog/queue"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Scrapes running beside appends, reads, sends, receives and deletes (and
// each other) see counters that never go back, histograms whose buckets
// add up, and race with nothing (go test -race).
func TestScrapesBesideTraffic(t *testing.T) {
	l := openLog(t, t.TempDir(), engine.Options{SegmentBytes: 4096, Sync: engine.SyncAlways})
	q := openQueue(t, t.TempDir(), queue.Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewLogCollector(l, "events"), metrics.NewQueueCollector(q, "jobs"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	work := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := f(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	work(func() error { // appends, each synced, and a read of each
		off, err := l.Append([]byte("event"))
		if err != nil {
			return err
		}
		r, err := l.Read(off)
		if err == nil {
			r.Release()
		}
		return err
	})
	work(func() error { // a send, a receive and a delete
		if _, err := q.Send([]byte("job")); err != nil {
			return err
		}
		m, ok, err := q.TryReceive()
		if err != nil || !ok {
			return err
		}
		return q.Delete(m.Offset)
	})

	counters := []string{"pagelog_appends_total", "pagelog_reads_total", "pagelog_syncs_total",
		"pagelog_queue_sent_total", "pagelog_queue_received_total", "pagelog_queue_deleted_total"}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := map[string]float64{}
			scrapes := 0
			for ctx.Err() == nil {
				mfs, err := reg.Gather()
				if err != nil {
					t.Error(err)
					return
				}
				byName := map[string]float64{}
				var hist *dto.Histogram
				for _, mf := range mfs {
					m := mf.Metric[0]
					byName[mf.GetName()] = m.GetCounter().GetValue()
					if m.Histogram != nil {
						hist = m.Histogram
					}
				}
				// One Stats snapshot: the histogram counts the syncs of
				// pagelog_syncs_total, and its buckets are cumulative.
				for i, b := range hist.Bucket {
					if b.GetCumulativeCount() > hist.GetSampleCount() || i > 0 && b.GetCumulativeCount() < hist.Bucket[i-1].GetCumulativeCount() {
						t.Errorf("bucket %d: %d of %d", i, b.GetCumulativeCount(), hist.GetSampleCount())
					}
				}
				if float64(hist.GetSampleCount()) != byName["pagelog_syncs_total"] {
					t.Errorf("histogram count %d, pagelog_syncs_total %v", hist.GetSampleCount(), byName["pagelog_syncs_total"])
				}
				for _, name := range counters {
					if byName[name] < last[name] {
						t.Errorf("%s went from %v to %v", name, last[name], byName[name])
					}
					last[name] = byName[name]
				}
				scrapes++
			}
			if scrapes < 10 || last["pagelog_appends_total"] == 0 || last["pagelog_queue_deleted_total"] == 0 {
				t.Errorf("%d scrapes, last %v", scrapes, last)
			}
		}()
	}
	wg.Wait()
}
