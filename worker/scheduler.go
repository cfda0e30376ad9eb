package worker

import (
	"context"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/prometheus/client_golang/prometheus"
)

// crons are the cron schedulers a worker hosts, and their metrics.
type crons struct {
	mu      sync.Mutex
	scheds  []*scheduler.Scheduler
	started bool
	runs    *prometheus.CounterVec
	offset  *prometheus.GaugeVec
}

// Scheduler returns a cron scheduler (see package scheduler) that takes its
// locks from the worker's lock client, logs with the worker's logger, and
// feeds the worker's metrics: asynqlock_cron_runs_total{job,outcome} and
// asynqlock_cron_clock_offset_seconds{node} (this replica's clock offset to
// each lock node). The worker starts it when Run starts serving (at once if
// Run already did) and stops it on shutdown, waiting for running jobs
// within the shutdown timeout. opts come after the worker's own, so they
// may override the logger, but not the observers.
func (w *Worker) Scheduler(opts ...scheduler.Option) (*scheduler.Scheduler, error) {
	c := w.cronHost()
	base := []scheduler.Option{scheduler.WithLogger(w.log)}
	if w.traces != nil {
		base = append(base, scheduler.WithTracerProvider(w.traces))
	}
	wired := []scheduler.Option{
		scheduler.WithObserver(func(e scheduler.Event) {
			switch {
			case e.Outcome != scheduler.OutcomeClock:
				c.zero(e.Job)
				c.runs.WithLabelValues(e.Job, string(e.Outcome)).Inc()
			case e.Err == nil:
				c.offset.WithLabelValues(e.Node).Set(e.Offset.Seconds())
			}
		}),
	}
	s, err := scheduler.New(w.locks, append(append(base, opts...), wired...)...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scheds = append(c.scheds, s)
	if c.started {
		s.Start()
	}
	return s, nil
}

// cronHost makes the hosted schedulers' state and metrics on first use.
func (w *Worker) cronHost() *crons {
	w.cronOnce.Do(func() {
		f := factory{w.reg}
		w.crons = &crons{
			runs: f.counterVec("asynqlock_cron_runs_total",
				"Cron job runs on this replica, by job and outcome (ran, skipped_other_replica, skipped_beyond_skew, caught_up, ...).",
				"job", "outcome"),
			offset: f.gaugeVec("asynqlock_cron_clock_offset_seconds",
				"This replica's clock offset to each lock node (node minus replica), as last measured by its cron schedulers.",
				"node"),
		}
	})
	return w.crons
}

// startCrons starts the hosted schedulers.
func (w *Worker) startCrons() {
	c := w.cronHost()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = true
	for _, s := range c.scheds {
		s.Start()
		for _, e := range s.Entries() {
			c.zero(e.Job)
		}
	}
}

// stopCrons stops the hosted schedulers, waiting for their running jobs
// at most timeout.
func (w *Worker) stopCrons(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := w.cronHost()
	c.mu.Lock()
	scheds := c.scheds
	c.mu.Unlock()
	for _, s := range scheds {
		if err := s.Stop(ctx); err != nil {
			w.log.Warn("cron scheduler stopped before its jobs ended", "err", err)
		}
	}
}

// runOutcomes are the outcomes of a run, each job's series of which exist
// from its start (or its first event, for a job registered later).
var runOutcomes = []scheduler.Outcome{scheduler.OutcomeRan, scheduler.OutcomeFailed,
	scheduler.OutcomeSkippedOtherReplica, scheduler.OutcomeSkippedOverlap,
	scheduler.OutcomeSkippedBeyondSkew, scheduler.OutcomeLockError, scheduler.OutcomeLate}

// zero makes job's run series at 0.
func (c *crons) zero(job string) {
	for _, o := range runOutcomes {
		c.runs.WithLabelValues(job, string(o))
	}
}
