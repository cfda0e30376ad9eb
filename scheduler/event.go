package scheduler

import (
	"context"
	"log/slog"
	"time"
)

// Outcome tells what became of one run of a job on one replica.
type Outcome int

// Outcomes. Each run reports exactly one of them, except OutcomeDelayed,
// which is reported when a delayed run starts and is followed by the run's
// own outcome.
const (
	// OutcomeRan: this replica ran the tick and the job returned nil.
	OutcomeRan Outcome = iota + 1
	// OutcomeFailed: this replica ran the tick and the job returned an error,
	// or its lock was lost while it ran (Err matches redlock.ErrLockLost), or
	// the bridge could not enqueue.
	OutcomeFailed
	// OutcomePanicked: the job panicked; Err is a *PanicError. The scheduler
	// goes on.
	OutcomePanicked
	// OutcomeSkippedOtherReplica: another replica holds (or held) the tick.
	OutcomeSkippedOtherReplica
	// OutcomeSkippedOverlap: this replica won the tick but the previous run
	// of the job was still running (SkipIfRunning, or DelayIfRunning after
	// waiting the max delay). The tick is not run anywhere.
	OutcomeSkippedOverlap
	// OutcomeDelayed: the tick waited for the previous run (DelayIfRunning)
	// and starts now; Duration is the wait.
	OutcomeDelayed
	// OutcomeSkippedNoTick: the run did not start within the skew of an
	// activation of the schedule (Err matches ErrNoTick); Tick is zero.
	OutcomeSkippedNoTick
	// OutcomeLockError: the lock nodes gave no answer (Err matches
	// redlock.ErrQuorum, redlock.ErrClosed or a context error); this replica
	// did not run the tick.
	OutcomeLockError
	// OutcomeEnqueued: the bridge enqueued the tick's task (TaskID).
	OutcomeEnqueued
	// OutcomeAlreadyEnqueued: the bridge found the tick's task already
	// enqueued (asynq.ErrTaskIDConflict): not an error.
	OutcomeAlreadyEnqueued
	// OutcomeMisconfigured is no longer reported: a configuration that
	// cannot run is refused where it is made (NewSingleton, Register, a
	// panic from Singleton).
	OutcomeMisconfigured
	// OutcomeSkippedBeyondSkew: another replica ran the tick earlier than
	// any replica within the skew could have started it (its record was
	// found): a clock offset or delivery delay beyond the skew. The tick is
	// not run again.
	OutcomeSkippedBeyondSkew
	// OutcomeCaughtUp: with WithCatchUp, a tick that no replica ran (all
	// were down) starts late, when this replica started; Duration is how
	// late. It is followed by the run's own outcome.
	OutcomeCaughtUp
)

// String returns the outcome's name, suitable as a metric label.
func (o Outcome) String() string {
	switch o {
	case OutcomeRan:
		return "ran"
	case OutcomeFailed:
		return "failed"
	case OutcomePanicked:
		return "panicked"
	case OutcomeSkippedOtherReplica:
		return "skipped_other_replica"
	case OutcomeSkippedOverlap:
		return "skipped_overlap"
	case OutcomeDelayed:
		return "delayed"
	case OutcomeSkippedNoTick:
		return "skipped_no_tick"
	case OutcomeLockError:
		return "lock_error"
	case OutcomeEnqueued:
		return "enqueued"
	case OutcomeAlreadyEnqueued:
		return "already_enqueued"
	case OutcomeMisconfigured:
		return "misconfigured"
	case OutcomeSkippedBeyondSkew:
		return "skipped_beyond_skew"
	case OutcomeCaughtUp:
		return "caught_up"
	}
	return "unknown"
}

// level is the log level of an outcome.
func (o Outcome) level() slog.Level {
	switch o {
	case OutcomeRan, OutcomeDelayed, OutcomeEnqueued:
		return slog.LevelInfo
	case OutcomeSkippedOverlap, OutcomeSkippedNoTick, OutcomeLockError, OutcomeSkippedBeyondSkew, OutcomeCaughtUp:
		return slog.LevelWarn
	case OutcomeFailed, OutcomePanicked, OutcomeMisconfigured:
		return slog.LevelError
	}
	return slog.LevelDebug // skipped_other_replica, already_enqueued
}

// Event is what the observer receives for a run.
type Event struct {
	Job      string        // the job's name
	Tick     time.Time     // the activation the run belongs to; zero if none
	Outcome  Outcome       // what became of the run
	Duration time.Duration // the job's run time (ran, failed, panicked), the wait (delayed)
	TaskID   string        // the asynq task ID (bridge only)
	Err      error         // the cause of a failure or skip
	Replica  string        // the replica that reports the event (WithReplica)
}

// report logs ev and hands it to the observer.
func (r *runner) report(ev Event) {
	ev.Job, ev.Replica = r.name, r.cfg.replica
	r.note(ev)
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs, slog.String("job", ev.Job), slog.String("outcome", ev.Outcome.String()),
		slog.String("replica", ev.Replica))
	if !ev.Tick.IsZero() {
		attrs = append(attrs, slog.Time("tick", ev.Tick))
	}
	if ev.Duration > 0 {
		attrs = append(attrs, slog.Duration("duration", ev.Duration))
	}
	if ev.TaskID != "" {
		attrs = append(attrs, slog.String("task_id", ev.TaskID))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.Any("err", ev.Err))
	}
	r.cfg.logger.LogAttrs(context.Background(), ev.Outcome.level(), "cron job "+ev.Outcome.String(), attrs...)
	if r.cfg.observer != nil {
		r.cfg.observer(ev)
	}
}
