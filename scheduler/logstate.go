package scheduler

import (
	"context"
	"log/slog"

	"github.com/asynqlock/asynqlock/statelog"
)

// logState is what a job's log lines follow (statelog): a Warn or
// an Error once per change of state, not once per tick, so that a job
// failing every second, or lock nodes down for an hour, make one line each
// (the observer still gets every event), and one Info when it is back.
type logState struct {
	trouble   statelog.State // the job's last Warn or Error outcome
	armed     bool           // overlap: a run ended since the last skip (guarded by runner.mu)
	byID      statelog.State // bridge: enqueueing by task ID alone, nodes unavailable
	outOfStep statelog.State // another replica runs the job at other ticks: warned once for its life
	pace      statelog.State // interval job: started more often than its interval
}

// settle gives the states that end the usual settle time.
func (s *logState) settle() {
	s.trouble.Settle, s.byID.Settle = statelog.Settle, statelog.Settle
}

// log logs ev: its own level the first time a Warn or Error outcome is
// reported, Debug while the same outcome repeats; the outcome that ends a
// trouble logs, once, that the job is back.
func (r *runner) log(ev Event, attrs []any) {
	lvl, log, msg := ev.level(), r.cfg.logger, "cron job "+string(ev.Outcome)
	switch {
	case ev.Outcome == OutcomeLate:
		log.Log(context.Background(), lvl, msg, append(attrs, "err", ev.Err)...) // a state of one run, its own outcome follows
	case lvl >= slog.LevelWarn:
		r.setArmed(false)
		r.logs.trouble.Fail(log, lvl, msg, ev.Err, attrs...)
	default:
		if ev.Err != nil {
			attrs = append(attrs, "err", ev.Err)
		}
		log.Debug(msg, attrs...)
		if r.ends(ev.Outcome) {
			r.logs.trouble.OK(log, "cron job back to normal", "job", r.name, "replica", r.cfg.replica, "outcome", string(ev.Outcome))
		}
	}
}

// ends reports whether a healthy outcome ends the trouble, from this
// replica's own evidence. A run ends a failure (a lost lock among them) or
// a skip beyond the skew; a tick another replica ran also shows that the
// lock nodes answer again. An overlap ends with two runs of this replica
// with no skip between them: a job that overruns its interval runs a tick
// after each skip, and a tick another replica took may have been skipped
// there.
func (r *runner) ends(o Outcome) bool {
	switch r.logs.trouble.Failing() {
	case "":
		return false
	case "cron job " + string(OutcomeSkippedOverlap):
		if o != OutcomeRan {
			return false
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		done := r.logs.armed
		r.logs.armed = true
		return done
	case "cron job " + string(OutcomeLockError):
		return o == OutcomeRan || o == OutcomeSkippedOtherReplica
	}
	return o == OutcomeRan
}

func (r *runner) setArmed(v bool) {
	r.mu.Lock()
	r.logs.armed = v
	r.mu.Unlock()
}

// enqueueByID logs, at Warn once per outage of the lock nodes, that the
// bridge enqueues by task ID alone.
func (r *runner) enqueueByID(ev Event, err error) {
	r.logs.byID.Fail(r.cfg.logger, slog.LevelWarn, "cron job: lock nodes unavailable, enqueueing by task ID only", err,
		"job", r.name, "tick", ev.Tick, "replica", r.cfg.replica)
}

// lockedAgain notes that the bridge won a tick lock: if it had enqueued by
// task ID alone, it says, once, that the lock nodes are back.
func (r *runner) lockedAgain() {
	r.logs.byID.OK(r.cfg.logger, "cron job: lock nodes answer again, enqueueing under the tick lock", "job", r.name, "replica", r.cfg.replica)
}
