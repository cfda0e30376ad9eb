package worker

import "github.com/prometheus/client_golang/prometheus"

// factory makes the worker's collectors and registers them as it makes
// them, so that each is declared once, in one line.
type factory struct{ reg prometheus.Registerer }

func (f factory) counter(name, help string) prometheus.Counter {
	return register(f.reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(f.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	return register(f.reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(f.reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// histogramVec takes exponential buckets: count of them from start, each
// factor times the one before.
func (f factory) histogramVec(name, help string, start, factor float64, count int, labels ...string) *prometheus.HistogramVec {
	opts := prometheus.HistogramOpts{Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(start, factor, count)}
	return register(f.reg, prometheus.NewHistogramVec(opts, labels))
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	reg.MustRegister(c)
	return c
}
