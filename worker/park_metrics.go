package worker

import (
	"sync"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// parkMetrics are the collectors of parking and hand-overs. The number of
// parked tasks is a total over resources (no resource label: bounded
// cardinality), from the FIFO lengths this process last saw.
type parkMetrics struct {
	promotions prometheus.Counter
	parkTime   prometheus.Histogram
	handovers  *prometheus.CounterVec
	parked     prometheus.Gauge

	mu   sync.Mutex
	last map[string]int // resource -> parked tasks last seen
	sum  int            // of last
}

// parkedResourcesTracked bounds the resources whose parked count is kept.
const parkedResourcesTracked = 1024

func newParkMetrics(reg prometheus.Registerer) *parkMetrics {
	m := &parkMetrics{
		promotions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asynqlock_task_promotions_total",
			Help: "Parked tasks moved back to their queue because a task of their resource started or ended.",
		}),
		parkTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "asynqlock_task_park_seconds",
			Help:    "How long promoted tasks were parked.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asynqlock_lock_handovers_total",
			Help: "Locks obtained after waiting, by kind: local (released by a task of this process just before) or remote.",
		}, []string{"kind"}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "asynqlock_parked_tasks",
			Help: "Tasks parked on the resources this process saw, as last seen (parkings are also counted in asynqlock_task_conflicts_total{action=\"park\"}).",
		}),
		last: map[string]int{},
	}
	reg.MustRegister(m.promotions, m.parkTime, m.handovers, m.parked)
	return m
}

// observe takes the middleware events about parking and hand-overs.
func (m *parkMetrics) observe(e middleware.Event) {
	switch {
	case e.Kind == "promoted":
		m.promotions.Inc()
		m.parkTime.Observe(e.Wait.Seconds())
		m.seen(e.Resource, e.Parked)
	case e.Kind == "conflict" && e.Action == "park", e.Kind == "parked":
		m.seen(e.Resource, e.Parked)
	case e.Kind == "acquired" && e.Handover != "":
		m.handovers.WithLabelValues(e.Handover).Inc()
	}
}

func (m *parkMetrics) seen(res string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.last[res]
	if !ok && len(m.last) >= parkedResourcesTracked {
		return
	}
	m.sum += n - old
	if n == 0 {
		delete(m.last, res)
	} else {
		m.last[res] = n
	}
	m.parked.Set(float64(m.sum))
}
