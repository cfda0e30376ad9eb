// Package locktest gives the tests and benchmarks of this repository's
// other modules the lock mechanics the middleware uses and redlock's users
// do not (internal/lockutil): completion records, which the benchmarks size
// and the fault tests check on real nodes, and the Client settings they turn
// to measure a mechanism on and off. Like the other harnesses, it is
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

// WithLocalQueue turns a Client's in-process queue of Acquire callers on or
// off (default on): off, its callers contend on the nodes as separate
// processes do.
func WithLocalQueue(on bool) redlock.Option { return lockutil.LocalQueue(on).(redlock.Option) }

// WithBatchWindow sets how long a Client's node workers may hold a call back
// to send it with others (docs/design/BATCHING.md; 0: never).
func WithBatchWindow(d time.Duration) redlock.Option {
	return lockutil.BatchWindow(d).(redlock.Option)
}

// OnHandOver calls f with the result of each round in which a Client's
// Release passed the lock to a waiting Acquire of the same Client (nil: the
// waiter holds it by that round; docs/design/HANDOVER.md).
func OnHandOver(f func(error)) redlock.Option { return lockutil.OnHandOver(f).(redlock.Option) }
