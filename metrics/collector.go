package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// figure is one metric of a collector: a gauge or a counter whose value a
// collector takes from the stats snapshot S of a scrape.
type figure[S any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*S) float64
}

// figures builds the descriptions of a collector's figures, each with the
// constant label label=name.
type figures[S any] struct {
	labels prometheus.Labels
	list   []figure[S]
}

func newFigures[S any](label, name string) *figures[S] {
	return &figures[S]{labels: prometheus.Labels{label: name}}
}

func (f *figures[S]) desc(name, help string, variable ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, variable, f.labels)
}

func (f *figures[S]) gauge(name, help string, value func(*S) float64) {
	f.list = append(f.list, figure[S]{f.desc(name, help), prometheus.GaugeValue, value})
}

func (f *figures[S]) counter(name, help string, value func(*S) uint64) {
	f.list = append(f.list, figure[S]{f.desc(name, help), prometheus.CounterValue,
		func(s *S) float64 { return float64(value(s)) }})
}

func (f *figures[S]) describe(ch chan<- *prometheus.Desc) {
	for _, m := range f.list {
		ch <- m.desc
	}
}

func (f *figures[S]) collect(ch chan<- prometheus.Metric, s *S) {
	for _, m := range f.list {
		ch <- constMetric(m.desc, m.kind, m.value(s))
	}
}

// constMetric is prometheus.MustNewConstMetric without the panic: a bad
// description (say, a name label that is not UTF-8) fails the scrape with
// an error instead of the process.
func constMetric(desc *prometheus.Desc, kind prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(desc, kind, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}

// flag is 1 for true, 0 for false.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
