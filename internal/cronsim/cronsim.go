// Package cronsim gives the tests of every module two options of
// package scheduler that no user needs: several replicas simulated in one
// process need their own clocks and names. Package scheduler installs them
// when it is initialized.
//
//	scheduler.Singleton(locks, "report",
//		cronsim.WithClock[scheduler.Option](func() time.Time { return time.Now().Add(offset) }),
//		cronsim.WithReplica[scheduler.Option]("replica-2"))
package cronsim

import "time"

// Installed by package scheduler.
var (
	Clock   func(now func() time.Time) any
	Replica func(name string) any
)

// WithClock returns the scheduler option that sets the clock from which a
// run's tick is told (default time.Now): the clock of the cron that runs
// the job. O is scheduler.Option.
func WithClock[O any](now func() time.Time) O { return Clock(now).(O) }

// WithReplica returns the scheduler option that names this replica in
// events, logs and lock holders (default "<hostname>:<pid>"). O is
// scheduler.Option.
func WithReplica[O any](name string) O { return Replica(name).(O) }
