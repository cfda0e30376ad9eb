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

// Outcomes. Each run reports exactly one of them; OutcomeLate is reported
// when a late run starts and is followed by the run's own outcome, and
// OutcomeClock reports a clock measurement, not a run.
const (
	// OutcomeRan: this replica ran the tick and the job returned nil, or
	// the bridge enqueued the tick's task (TaskID).
	OutcomeRan Outcome = "ran"
	// OutcomeFailed: this replica ran the tick and the job returned an
	// error or panicked (the stack is logged), or its lock was lost while
	// it ran (Err matches redlock.ErrLockLost), or the bridge could not
	// enqueue. A panic does not stop the scheduler.
	OutcomeFailed Outcome = "failed"
	// OutcomeSkippedOtherReplica: another replica holds (or held) the
	// tick, or the bridge found the tick's task already enqueued
	// (asynq.ErrTaskIDConflict). Not an error.
	OutcomeSkippedOtherReplica Outcome = "skipped_other_replica"
	// OutcomeSkippedOverlap: this replica won the tick but the previous
	// run of the job was still running (and, with WithDelayIfRunning,
	// still was after the max delay). The tick is not run anywhere.
	OutcomeSkippedOverlap Outcome = "skipped_overlap"
	// OutcomeSkippedBeyondSkew: this run was outside the skew: it started
	// more than the skew after any activation (Tick is zero), or another
	// replica ran the tick earlier than any replica within the skew could
	// have started it (the tick is not run again). A clock offset or
	// delivery delay beyond the skew: fix the clock or raise WithSkew.
	OutcomeSkippedBeyondSkew Outcome = "skipped_beyond_skew"
	// OutcomeLockError: the lock nodes gave no answer (Err matches
	// redlock.ErrQuorum, redlock.ErrClosed or a context error), or
	// answered too late to be sure; this replica did not run the tick.
	OutcomeLockError Outcome = "lock_error"
	// OutcomeLate: a run starts late, Duration late, and its own outcome
	// follows. Err says why: it waited for the previous run
	// (WithDelayIfRunning), or it is a tick that no replica ran, caught up
	// (WithCatchUp).
	OutcomeLate Outcome = "late"
	// OutcomeClock: not a run but a measurement of this replica's clock
	// offset to one lock node: Node, Offset, Duration (the round trip; the
	// offset's error is at most half of it), Err if the node did not
	// answer. Taken when a Scheduler starts and then at most once a minute
	// while jobs run.
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
