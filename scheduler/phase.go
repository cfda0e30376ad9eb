package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// phaseResource is the marker of a job's latest tick, by which replicas
// that run it on schedules out of step find each other.
func (r *runner) phaseResource() string { return r.prefix + r.name + ":phase" }

// phaseNote names a tick and the interval before it in the marker.
func phaseNote(tick time.Time, interval time.Duration) string {
	return "tick " + strconv.FormatInt(tick.UnixMilli(), 10) + " every " + strconv.FormatInt(interval.Milliseconds(), 10)
}

// parsePhaseNote reads a note phaseNote wrote.
func parsePhaseNote(note string) (tick time.Time, interval time.Duration, ok bool) {
	f := strings.Fields(note)
	if len(f) != 4 || f[0] != "tick" || f[2] != "every" {
		return time.Time{}, 0, false
	}
	ms, err1 := strconv.ParseInt(f[1], 10, 64)
	every, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || every <= 0 {
		return time.Time{}, 0, false
	}
	return time.UnixMilli(ms), time.Duration(every) * time.Millisecond, true
}

// checkPhase detects replicas that run the job at ticks no single schedule
// has: robfig's "@every d" counts from each cron's start, so replicas
// started at different seconds each run every one of their own ticks, and
// the job runs once per replica per interval, with no lock conflict to
// show it. Only a Singleton without a schedule can meet it (WithSpec
// refuses "@every", a Scheduler aligns it), once the interval between its
// ticks is known, whole seconds, at least 2s and the same twice in a row.
//
// The winner of a tick marks it, with the interval, for a little less than
// the interval. A winner that finds the mark of a tick of the same
// interval that is not a whole number of intervals away from its own runs
// out of step with another replica: it warns once (repeats at Debug).
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
	ctx, cancel := context.WithTimeout(r.host.stopping, releaseTimeout)
	other, err := r.locks.Mark(ctx, r.phaseResource(), every-every/4, phaseNote(tick, every))
	cancel()
	if !errors.Is(err, redlock.ErrLocked) {
		return // marked, or the lock nodes are busy: next tick
	}
	t, d, ok := parsePhaseNote(other)
	if !ok || d != every || tick.Sub(t)%every == 0 {
		return // in step, or another table (a deployment under way)
	}
	r.warnOutOfStep(tick, t, every)
}

// warnOutOfStep logs, at Warn the first time, that the job runs out of
// step with another replica.
func (r *runner) warnOutOfStep(tick, other time.Time, every time.Duration) {
	r.logs.outOfStep.Fail(r.cfg.logger, slog.LevelWarn,
		"cron job runs out of step with another replica: each runs every tick of its own, so the job runs once per replica per interval. "+
			"robfig's @every counts from each cron's start; schedule the job with c.Schedule(scheduler.Every(d), job)", nil,
		"job", r.name, "replica", r.cfg.replica, "tick", tick, "other_tick", other, "interval", every)
}
