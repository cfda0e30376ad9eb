package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/statelog"
)

const (
	// clockCheckEvery is how often a replica measures its clock offset.
	clockCheckEvery = time.Minute
	// clockCheckTimeout bounds one measurement.
	clockCheckTimeout = 5 * time.Second
)

// clockReport is one lock node's clock as this replica measured it.
type clockReport struct {
	Node   string        // the node's address (no credentials)
	Offset time.Duration // the node's clock minus this replica's tick clock
	RTT    time.Duration // the round trip of the measurement; its error is at most RTT/2
	Err    error         // the node did not answer
}

// clockWatch measures a replica's clock offset to the lock nodes, at most
// every clockCheckEvery when poked (at each run, and when a Scheduler
// starts), and warns once per change of state when a node's offset is
// above half the skew.
type clockWatch struct {
	locks locker
	cfg   config

	mu      sync.Mutex
	next    time.Time                  // the earliest next measurement
	busy    bool                       // a measurement is under way
	far     map[string]*statelog.State // per node: its offset above half the skew
	failing statelog.State             // measurements failing as a whole
}

func newClockWatch(locks locker, cfg config) *clockWatch {
	return &clockWatch{locks: locks, cfg: cfg, far: map[string]*statelog.State{}}
}

// poke starts a measurement in the background if one is due.
func (w *clockWatch) poke() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.busy || now.Before(w.next) {
		return
	}
	w.busy, w.next = true, now.Add(clockCheckEvery)
	go w.measure()
}

// measure takes one measurement, judges and reports it.
func (w *clockWatch) measure() {
	ctx, cancel := context.WithTimeout(context.Background(), clockCheckTimeout)
	reps, err := w.locks.Check(ctx)
	cancel()
	// Offsets are to the tick clock, which a simulation may shift (internal/cronsim).
	shift := time.Until(w.cfg.now())
	for i := range reps {
		reps[i].Offset -= shift
	}
	w.judge(reps, err)
	if w.cfg.observer != nil && err == nil {
		for _, r := range reps {
			w.cfg.observer(Event{Outcome: OutcomeClock, Replica: w.cfg.replica, Node: r.Node, Offset: r.Offset, Duration: r.RTT, Err: r.Err})
		}
	}
	w.mu.Lock()
	w.busy = false
	w.mu.Unlock()
}

// judge logs changes of state: a node's offset crossing half the skew, a
// measurement that fails or recovers.
func (w *clockWatch) judge(reps []clockReport, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.cfg.logger
	if err != nil {
		w.failing.Fail(log, slog.LevelWarn, "cron clock check failed: clock offsets to the lock nodes unknown", err, "replica", w.cfg.replica)
		return
	}
	w.failing.OK(log, "cron clock check works again", "replica", w.cfg.replica)
	for _, r := range reps {
		if r.Err != nil {
			continue // the lock client reports node failures
		}
		st := w.far[r.Node]
		if st == nil {
			st = &statelog.State{}
			w.far[r.Node] = st
		}
		if r.Offset.Abs() > w.cfg.skew/2 {
			st.Fail(log, slog.LevelWarn, "cron clock offset to a lock node above half the skew: fix the clock (NTP) or raise WithSkew", nil,
				"replica", w.cfg.replica, "node", r.Node, "offset", r.Offset, "rtt", r.RTT, "skew", w.cfg.skew,
				"beyond_skew", r.Offset.Abs() > w.cfg.skew)
		} else {
			st.OK(log, "cron clock offset to a lock node back within half the skew",
				"replica", w.cfg.replica, "node", r.Node, "offset", r.Offset, "skew", w.cfg.skew)
		}
	}
}
