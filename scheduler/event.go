package scheduler

import (
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Outcome tells what became of one run of a job on one replica; its value
// is suitable as a metric label.
type Outcome string

// Outcomes. Each run reports exactly one; OutcomeLate comes before the
// late run's own, OutcomeClock is a clock measurement (docs/guide/CRON.md).
const (
	// OutcomeRan: this replica ran the tick and the job returned nil, or
	// the bridge enqueued the tick's task (TaskID).
	OutcomeRan Outcome = "ran"
	// OutcomeFailed: the job returned an error or panicked (the stack is
	// logged), its lock was lost (Err matches redlock.ErrLockLost), the
	// bridge could not enqueue, or NewJobs was not given the job.
	OutcomeFailed Outcome = "failed"
	// OutcomeSkippedOtherReplica: another replica has the tick (or the
	// bridge found its task enqueued). Not an error.
	OutcomeSkippedOtherReplica Outcome = "skipped_other_replica"
	// OutcomeSkippedOverlap: the previous run still ran (past the max
	// delay of WithDelayIfRunning); the tick runs nowhere.
	OutcomeSkippedOverlap Outcome = "skipped_overlap"
	// OutcomeSkippedBeyondSkew: the run started more than the skew after
	// any activation (Tick is zero), or another replica ran the tick
	// earlier than the skew allows: fix the clock or raise WithSkew.
	OutcomeSkippedBeyondSkew Outcome = "skipped_beyond_skew"
	// OutcomeLockError: the lock nodes gave no answer (Err matches
	// redlock.ErrQuorum, redlock.ErrClosed or a context error), or
	// answered too late to be sure; the tick did not run here.
	OutcomeLockError Outcome = "lock_error"
	// OutcomeLate: a run starts Duration late: it waited for the previous
	// run, or catches up a tick no replica ran (Err says which).
	OutcomeLate Outcome = "late"
	// OutcomeClock: a measurement of this replica's clock offset to one
	// lock node (Node, Offset; Duration is the round trip, Err a failure).
	OutcomeClock Outcome = "clock"
)

// errWaited and errCaughtUp say why a run is late.
var (
	errWaited   = errors.New("scheduler: waited for the previous run")
	errCaughtUp = errors.New("scheduler: caught up: no replica ran this tick")
)

// level is the log level of an event, before repeats are muted (see
// runner.log): nothing a healthy job does per tick is logged above
// Debug; a caught-up tick (once per start), skips and lock errors at Warn;
// failures at Error.
func (e Event) level() slog.Level {
	switch e.Outcome {
	case OutcomeLate:
		if errors.Is(e.Err, errCaughtUp) {
			return slog.LevelWarn
		}
	case OutcomeSkippedOverlap, OutcomeLockError, OutcomeSkippedBeyondSkew:
		return slog.LevelWarn
	case OutcomeFailed:
		return slog.LevelError
	}
	return slog.LevelDebug // ran, skipped_other_replica, waited, clock
}

// Event is what the observer receives for a run, or for a clock
// measurement (OutcomeClock).
type Event struct {
	Job      string        // the job's name
	Tick     time.Time     // the activation the run belongs to; zero if none
	Outcome  Outcome       // what became of the run
	Duration time.Duration // the job's run time (ran, failed), how late (late), the round trip (clock)
	TaskID   string        // the asynq task ID (bridge only): "cron:<job>:<tick in Unix ms>"
	Err      error         // the cause of a failure or skip, or why a run is late
	Replica  string        // the replica that reports the event (its "<hostname>:<pid>")
	Node     string        // clock: the lock node's address (no credentials)
	Offset   time.Duration // clock: the node's clock minus this replica's

	span trace.Span // the tick's span, ended by report
}

// report logs ev and hands it to the observer.
func (r *runner) report(ev Event) {
	ev.Job, ev.Replica = r.name, r.cfg.replica
	r.note(ev)
	attrs := []any{"job", ev.Job, "outcome", string(ev.Outcome), "replica", ev.Replica}
	if !ev.Tick.IsZero() {
		attrs = append(attrs, "tick", ev.Tick)
	}
	if ev.Duration > 0 {
		attrs = append(attrs, "duration", ev.Duration)
	}
	if ev.TaskID != "" {
		attrs = append(attrs, "task_id", ev.TaskID)
	}
	if pe := (*panicError)(nil); errors.As(ev.Err, &pe) {
		attrs = append(attrs, "stack", string(pe.stack))
	}
	r.log(ev, attrs)
	endTick(ev)
	if r.cfg.observer != nil {
		r.cfg.observer(ev)
	}
}
