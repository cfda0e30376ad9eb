package worker

import (
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
	held       prometheus.Gauge
	// redeliveries counts re-deliveries of completed tasks that completed
	// without running their handler (their completion record was found).
	redeliveries prometheus.Counter
	quorumUp     prometheus.Gauge
	ready        prometheus.Gauge
	nodeUp       *prometheus.GaugeVec
	degraded     prometheus.Gauge
	brokerUp     prometheus.Gauge
	park         *parkMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := factory{reg}
	return &metrics{
		acquire: f.histogramVec("asynqlock_lock_acquire_seconds", "Time to acquire a lock (waiting included), by outcome.",
			0.0002, 2, 16, "outcome"),
		extensions: f.counterVec("asynqlock_lock_extensions_total", "Lock extensions, by result.", "result"),
		losses:     f.counter("asynqlock_lock_losses_total", "Held locks that were lost."),
		nodeErrors: f.counterVec("asynqlock_lock_node_errors_total", "Failed calls to a lock node, by node address.", "node"),
		conflicts: f.counterVec("asynqlock_task_conflicts_total",
			"Tasks that found their resource busy, by policy and action taken.", "policy", "action"),
		rollbacks: f.counterVec("asynqlock_task_rollbacks_total", "Rollback hook runs, by result.", "result"),
		badKeys:   f.counter("asynqlock_task_bad_keys_total", "Tasks archived because their lock key could not be derived."),
		held: f.gauge("asynqlock_locks_held",
			"Task locks held by this worker's running handlers (between the lock's acquisition and the handler's return)."),
		redeliveries: f.counter("asynqlock_task_redeliveries_skipped_total",
			"Re-deliveries of tasks that had completed, completed again without running their handler."),
		quorumUp: f.gauge("asynqlock_lock_quorum_up", "1 while a quorum of lock nodes answers, else 0."),
		ready:    f.gauge("asynqlock_worker_ready", "1 while the worker is ready (broker and lock quorum reachable)."),
		nodeUp: f.gaugeVec("asynqlock_lock_node_up",
			"1 while the lock node answered the last readiness probe, else 0, by node address.", "node"),
		degraded: f.gauge("asynqlock_lock_degraded",
			"1 while a minority of lock nodes is down (locking works, with less fault tolerance), else 0."),
		brokerUp: f.gauge("asynqlock_broker_up", "1 while the asynq broker answered the last readiness probe, else 0."),
		park:     newParkMetrics(reg),
	}
}

// observeLock is the redlock observer.
func (m *metrics) observeLock(e redlock.Event) {
	switch e.Kind {
	case redlock.EventAcquire:
		m.acquire.WithLabelValues(e.Outcome).Observe(e.Duration.Seconds())
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
	case "redelivery_skipped":
		m.redeliveries.Inc()
	}
}

func boolGauge(g prometheus.Gauge, v bool) {
	if v {
		g.Set(1)
	} else {
		g.Set(0)
	}
}

// Known label values, each series of which exists from the start (at 0),
// so that a query or an alert finds it before the first event.
var (
	acquireOutcomes = []string{"acquired", "locked", "quorum", "canceled", "error"} // redlock.Event.Outcome
	conflictActions = []string{"park", "requeue", "skip", "fail", "wait-exhausted-budget"}
	handoverKinds   = []string{"local", "remote"}
	resultLabels    = []string{"ok", "failed"}
)

// zero makes the series of the known label values, the conflicts' for the
// configured policy (a Handle option naming another adds its series at
// its first conflict).
func (m *metrics) zero(policy string) {
	for _, o := range acquireOutcomes {
		m.acquire.WithLabelValues(o)
	}
	for _, r := range resultLabels {
		m.extensions.WithLabelValues(r)
		m.rollbacks.WithLabelValues(r)
	}
	for _, a := range conflictActions {
		m.conflicts.WithLabelValues(policy, a)
	}
	for _, k := range handoverKinds {
		m.park.handovers.WithLabelValues(k)
	}
}
