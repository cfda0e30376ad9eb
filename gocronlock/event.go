package gocronlock

import (
	"log/slog"
	"time"
)

// Outcome tells what became of one Lock of a job on one replica, or of its
// running lock; its value is suitable as a metric label.
type Outcome string

// Outcomes. Each Lock reports exactly one; OutcomeLost is reported besides,
// when a running lock is lost while the job runs.
const (
	// OutcomeRan: this replica won the tick and the running lock; gocron
	// runs the job.
	OutcomeRan Outcome = "ran"
	// OutcomeSkippedOtherReplica: another replica holds (or held) the
	// tick. Err matches redlock.ErrLocked. Not an error.
	OutcomeSkippedOtherReplica Outcome = "skipped_other_replica"
	// OutcomeSkippedOverlap: this replica won the tick but the previous
	// run still holds the running lock; the tick runs nowhere. Err matches
	// ErrRunning and redlock.ErrLocked.
	OutcomeSkippedOverlap Outcome = "skipped_overlap"
	// OutcomeSkippedBeyondSkew: a cron job's run started more than the
	// skew after any activation (Err matches ErrBeyondSkew; Tick is zero).
	OutcomeSkippedBeyondSkew Outcome = "skipped_beyond_skew"
	// OutcomeLockError: the lock nodes gave no answer in time (Err matches
	// redlock.ErrQuorum, redlock.ErrClosed or a context error), or answered
	// too late to be sure; this replica does not run the tick.
	OutcomeLockError Outcome = "lock_error"
	// OutcomeUnknownJob: the job's name was not registered with New (Err
	// matches ErrUnknownJob); it runs nowhere.
	OutcomeUnknownJob Outcome = "unknown_job"
	// OutcomeLost: the running lock of a run under way could no longer be
	// proven held (Err matches redlock.ErrLockLost): another replica may
	// start the job's next tick while this run goes on. gocron gives its
	// job no context of the run to cancel, so the run is not stopped.
	OutcomeLost Outcome = "lost"
)

// Event reports one Lock of a job, or the loss of its running lock.
type Event struct {
	Job     string    // the gocron job's name, the key gocron passed to Lock
	Tick    time.Time // the tick the run belongs to; zero if none
	Outcome Outcome
	Err     error // why the run does not go ahead, or the loss; nil for OutcomeRan
}

// level is the level at which an outcome is logged the first time.
func (o Outcome) level() slog.Level {
	switch o {
	case OutcomeRan, OutcomeSkippedOtherReplica:
		return slog.LevelDebug
	}
	return slog.LevelWarn
}
