// Package locktest gives the tests and benchmarks of this repository's
// other modules the lock mechanics the middleware uses and redlock's users
// do not (internal/lockutil): completion records, which the benchmarks size
// and the fault tests check on real nodes. Like the other harnesses, it is
// built only with them, at the same commit.
package locktest

import (
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
)

// WithCompletion ties an acquisition to the unit of work id, as the
// middleware's records do: the acquisition looks the record up, and the
// release writes what RecordCompletion asks for, kept for window.
func WithCompletion(id string, window time.Duration) redlock.LockOption {
	return lockutil.Completion(id, window).(redlock.LockOption)
}

// RecordCompletion has l's release write its completion record for run.
func RecordCompletion(l *redlock.Lock, run int) error {
	return lockutil.MechanicsOf(l).RecordCompletion(run)
}
