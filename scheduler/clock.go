package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/statelog"
)

// clockWatch measures a replica's clock offset to the lock nodes, at most
// once a minute when poked (at each run, and when a Scheduler starts), and
// warns once per change when a node's offset is above half the skew.
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
	if now := time.Now(); !w.busy && !now.Before(w.next) {
		w.busy, w.next = true, now.Add(time.Minute)
		go w.measure()
	}
}

// measure takes one measurement, judges and reports it.
func (w *clockWatch) measure() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	reps, err := w.locks.Check(ctx)
	cancel()
	shift := time.Until(w.cfg.now()) // offsets are to the tick clock, which a simulation shifts
	for i := range reps {
		reps[i].ClockOffset -= shift
	}
	w.judge(reps, err)
	if w.cfg.observer != nil && err == nil {
		for _, r := range reps {
			w.cfg.observer(Event{Outcome: OutcomeClock, Replica: w.cfg.replica, Node: r.Addr, Offset: r.ClockOffset, Duration: r.RTT, Err: r.Err})
		}
	}
	w.mu.Lock()
	w.busy = false
	w.mu.Unlock()
}

// judge logs changes of state: a node's offset crossing half the skew, a
// measurement that fails or recovers (a node's own failure is the lock
// client's to report).
func (w *clockWatch) judge(reps []redlock.NodeReport, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	log, replica := w.cfg.logger, w.cfg.replica
	if err != nil {
		w.failing.Fail(log, slog.LevelWarn, "cron clock check failed: clock offsets to the lock nodes unknown", err, "replica", replica)
		return
	}
	w.failing.OK(log, "cron clock check works again", "replica", replica)
	for _, r := range reps {
		if r.Err != nil {
			continue
		}
		st := w.far[r.Addr]
		if st == nil {
			st = &statelog.State{}
			w.far[r.Addr] = st
		}
		if r.ClockOffset.Abs() > w.cfg.skew/2 {
			st.Fail(log, slog.LevelWarn, "cron clock offset to a lock node above half the skew: fix the clock (NTP) or raise WithSkew", nil,
				"replica", replica, "node", r.Addr, "offset", r.ClockOffset, "rtt", r.RTT, "skew", w.cfg.skew,
				"beyond_skew", r.ClockOffset.Abs() > w.cfg.skew)
		} else {
			st.OK(log, "cron clock offset to a lock node back within half the skew",
				"replica", replica, "node", r.Addr, "offset", r.ClockOffset, "skew", w.cfg.skew)
		}
	}
}

// checkPhase detects replicas that run a spec-less Singleton job at ticks
// no single schedule has: robfig's "@every d" counts from each cron's
// start, so replicas started at different seconds each run their own ticks,
// with no lock conflict to show it. Once the interval between ticks is
// known (whole seconds, at least 2s, the same twice in a row), the winner
// of a tick marks it with the interval for a little less than that; a
// winner that finds a mark of the same interval a fraction of an interval
// away from its own tick warns once.
func (r *runner) checkPhase(tick time.Time) {
	if r.sched != nil {
		return
	}
	r.mu.Lock()
	every, regular := r.learned, r.regular
	r.mu.Unlock()
	if !regular || every < 2*time.Second || every%time.Second != 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.host.stopping, lockutil.ReleaseTimeout)
	note := fmt.Sprintf("tick %d every %d", tick.UnixMilli(), every.Milliseconds())
	other, err := r.locks.Mark(ctx, r.prefix+r.name+":phase", every-every/4, note)
	cancel()
	if !errors.Is(err, redlock.ErrLocked) {
		return // marked, or the lock nodes are busy: next tick
	}
	var ms, otherEvery int64
	if n, _ := fmt.Sscanf(other, "tick %d every %d", &ms, &otherEvery); n != 2 || otherEvery != every.Milliseconds() ||
		tick.Sub(time.UnixMilli(ms))%every == 0 {
		return // in step, or another table (a deployment under way)
	}
	r.logs.outOfStep.Fail(r.cfg.logger, slog.LevelWarn,
		"cron job runs out of step with another replica: each runs every tick of its own, so the job runs once per replica per interval. "+
			"robfig's @every counts from each cron's start; schedule the job with c.Schedule(scheduler.Every(d), job)", nil,
		"job", r.name, "replica", r.cfg.replica, "tick", tick, "other_tick", time.UnixMilli(ms), "interval", every)
}
