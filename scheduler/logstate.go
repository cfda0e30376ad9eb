package scheduler

import (
	"context"
	"log/slog"
)

// trouble is the state a job's log lines follow: a library logs a Warn or
// an Error once per change of state, not once per tick, so that a job
// failing every second, or lock nodes down for an hour, make one line each
// (the observer still gets every event). Guarded by runner.mu.
type trouble struct {
	outcome Outcome // the outcome last logged at Warn or above; "" if healthy
	repeats int     // reports of it since, logged at Debug
	armed   bool    // overlap: a run ended since the last skip
	byID    bool    // bridge: enqueueing by task ID alone, nodes unavailable
	// outOfStep: another replica runs the job at other ticks (checkPhase);
	// warned once for the life of the job.
	outOfStep bool
}

// logLevel is the level at which ev is logged: its own level the first time
// a Warn or Error outcome is reported, Debug while the same outcome repeats.
// The outcome that ends a trouble logs, once, that the job is back.
func (r *runner) logLevel(ev Event) slog.Level {
	lvl := ev.level()
	if ev.Outcome == OutcomeLate {
		return lvl // a state of one run, its own outcome follows
	}
	r.mu.Lock()
	t := &r.trouble
	prev, repeats := t.outcome, t.repeats
	switch {
	case lvl < slog.LevelWarn:
		if prev != "" && t.ends(ev.Outcome) {
			*t = trouble{byID: t.byID, outOfStep: t.outOfStep}
		}
	case prev == ev.Outcome:
		t.repeats++
		t.armed = false
		lvl = slog.LevelDebug
	default:
		*t = trouble{outcome: ev.Outcome, byID: t.byID, outOfStep: t.outOfStep}
	}
	back := prev != "" && t.outcome == ""
	r.mu.Unlock()
	if back {
		r.cfg.logger.Info("cron job back to normal", "job", r.name, "replica", r.cfg.replica,
			"outcome", string(ev.Outcome), "after", string(prev), "repeats", repeats)
	}
	return lvl
}

// ends reports whether a healthy outcome ends the trouble, from this
// replica's own evidence. A run ends a failure or a skip beyond the skew;
// a tick another replica ran also shows that the lock nodes answer again.
// An overlap ends with two runs of this replica with no skip between them:
// a job that overruns its interval runs a tick after each skip, and a tick
// another replica took may have been skipped there.
func (t *trouble) ends(outcome Outcome) bool {
	if t.outcome == OutcomeSkippedOverlap {
		if outcome != OutcomeRan {
			return false
		}
		done := t.armed
		t.armed = true
		return done
	}
	return outcome == OutcomeRan ||
		outcome == OutcomeSkippedOtherReplica && t.outcome == OutcomeLockError
}

// enqueueByID logs, at Warn once per outage of the lock nodes, that the
// bridge enqueues by task ID alone.
func (r *runner) enqueueByID(ev Event, err error) {
	r.mu.Lock()
	first := !r.trouble.byID
	r.trouble.byID = true
	r.mu.Unlock()
	lvl := slog.LevelWarn
	if !first {
		lvl = slog.LevelDebug
	}
	r.cfg.logger.Log(context.Background(), lvl, "cron job: lock nodes unavailable, enqueueing by task ID only",
		"job", r.name, "tick", ev.Tick, "replica", r.cfg.replica, "err", err)
}

// lockedAgain notes that the bridge won a tick lock: if it had enqueued by
// task ID alone, it says, once, that the lock nodes are back.
func (r *runner) lockedAgain() {
	r.mu.Lock()
	was := r.trouble.byID
	r.trouble.byID = false
	r.mu.Unlock()
	if was {
		r.cfg.logger.Info("cron job: lock nodes answer again, enqueueing under the tick lock", "job", r.name, "replica", r.cfg.replica)
	}
}
