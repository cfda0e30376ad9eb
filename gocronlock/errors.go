package gocronlock

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test for them with errors.Is; the message of a returned
// error names the job and what is wrong. A run refused because another
// replica has the tick, or because the previous run still runs, fails with
// an error that matches redlock.ErrLocked (and ErrRunning for the latter):
// gocron hands it to the job's AfterLockError listener and skips the run.
var (
	// ErrInvalid means a configuration that cannot work, refused by New: a
	// nil client, no job, a bad or duplicate job name, an interval or cron
	// spec that cannot name shared ticks, a bad option value.
	ErrInvalid = errors.New("gocronlock: invalid configuration")
	// ErrUnknownJob is returned by Lock for a job name that New was not
	// given (WithInterval, WithCron): its ticks cannot be told, so it runs
	// nowhere rather than once per replica. Logged at Warn once per name.
	ErrUnknownJob = errors.New("gocronlock: job not registered")
	// ErrBeyondSkew is returned by Lock when a cron job's run starts more
	// than the skew after any activation of its spec (a run delayed by
	// gocron's limit modes, RunNow, or a clock beyond the skew): its tick's
	// record may already have expired elsewhere, so it does not run.
	ErrBeyondSkew = errors.New("gocronlock: run is not within the skew of an activation")
	// ErrRunning is returned by Lock, joined with redlock.ErrLocked, when
	// this replica won the tick but the job's previous run still holds its
	// running lock, here or on another replica: the tick is skipped
	// everywhere, as gocron's LimitModeReschedule skips it on one replica.
	ErrRunning = errors.New("gocronlock: previous run still running")
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
