package worker

import (
	"errors"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus collectors.
type metrics struct {
	acquire    *prometheus.HistogramVec
	extensions *prometheus.CounterVec
	losses     prometheus.Counter
	nodeErrors *prometheus.CounterVec
	conflicts  *prometheus.CounterVec
	rollbacks  *prometheus.CounterVec
	badKeys    prometheus.Counter
	quorumUp   prometheus.Gauge
	ready      prometheus.Gauge
	nodeUp     *prometheus.GaugeVec
	degraded   prometheus.Gauge
	brokerUp   prometheus.Gauge
	park       *parkMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "asynqlock_lock_acquire_seconds",
			Help:    "Time to acquire a lock (waiting included), by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}, []string{"outcome"}),
		extensions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asynqlock_lock_extensions_total",
			Help: "Lock extensions, by result.",
		}, []string{"result"}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asynqlock_lock_losses_total",
			Help: "Held locks that were lost.",
		}),
		nodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asynqlock_lock_node_errors_total",
			Help: "Failed calls to a lock node, by node address.",
		}, []string{"node"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asynqlock_task_conflicts_total",
			Help: "Tasks that found their resource busy, by policy and action taken.",
		}, []string{"policy", "action"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asynqlock_task_rollbacks_total",
			Help: "Rollback hook runs, by result.",
		}, []string{"result"}),
		badKeys: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "asynqlock_task_bad_keys_total",
			Help: "Tasks archived because their lock key could not be derived.",
		}),
		quorumUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "asynqlock_lock_quorum_up",
			Help: "1 while a quorum of lock nodes answers, else 0.",
		}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "asynqlock_worker_ready",
			Help: "1 while the worker is ready (broker and lock quorum reachable).",
		}),
		nodeUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "asynqlock_lock_node_up",
			Help: "1 while the lock node answered the last readiness probe, else 0, by node address.",
		}, []string{"node"}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "asynqlock_lock_degraded",
			Help: "1 while a minority of lock nodes is down (locking works, with less fault tolerance), else 0.",
		}),
		brokerUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "asynqlock_broker_up",
			Help: "1 while the asynq broker answered the last readiness probe, else 0.",
		}),
	}
	m.park = newParkMetrics(reg)
	reg.MustRegister(m.acquire, m.extensions, m.losses, m.nodeErrors, m.conflicts, m.rollbacks, m.badKeys,
		m.quorumUp, m.ready, m.nodeUp, m.degraded, m.brokerUp)
	return m
}

// observeLock is the redlock observer.
func (m *metrics) observeLock(e redlock.Event) {
	switch e.Kind {
	case redlock.EventAcquire:
		m.acquire.WithLabelValues(outcome(e.Err)).Observe(e.Duration.Seconds())
	case redlock.EventExtend:
		if e.Err == nil {
			m.extensions.WithLabelValues("ok").Inc()
		} else {
			m.extensions.WithLabelValues("failed").Inc()
		}
	case redlock.EventLost:
		m.losses.Inc()
	case redlock.EventNodeError:
		m.nodeErrors.WithLabelValues(e.Addr).Inc()
	}
}

// observeTask is the middleware observer.
func (m *metrics) observeTask(e middleware.Event) {
	m.park.observe(e)
	switch e.Kind {
	case "conflict":
		m.conflicts.WithLabelValues(e.Policy, e.Action).Inc()
	case "rollback":
		if e.Err == nil {
			m.rollbacks.WithLabelValues("ok").Inc()
		} else {
			m.rollbacks.WithLabelValues("failed").Inc()
		}
	case "bad_key":
		m.badKeys.Inc()
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, redlock.ErrLocked):
		return "locked"
	case errors.Is(err, redlock.ErrQuorum):
		return "quorum"
	}
	return "error"
}

func boolGauge(g prometheus.Gauge, v bool) {
	if v {
		g.Set(1)
	} else {
		g.Set(0)
	}
}
