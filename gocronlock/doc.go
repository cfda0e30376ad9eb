// Package gocronlock is a go-co-op/gocron v2 Locker over Redlock quorum
// locks (package redlock) under which each tick of a job runs at most once
// across the replicas of a service, even for a job of a millisecond,
// replicas whose schedulers started at different moments, and replica
// clocks offset from the lock nodes' by up to the skew
// (scheduler.WithSkew, default 1s).
//
// gocron passes its Locker only the job's name. Locking the name alone lets
// every replica run the same interval in turn, one after the other (gocron
// issue #841). This locker keys each run by the job and its tick, told from
// the job's schedule, given to [New] under the job's gocron name:
//
//	locker, err := gocronlock.New(locks, map[string]string{
//		"sync":   "@every 1m",  // gocron.DurationJob(time.Minute)
//		"report": "0 3 * * *", // gocron.CronJob("0 3 * * *", false)
//	})
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(sync), gocron.WithName("sync"))
//
// It is the scheduler package's cron core (scheduler.NewJobs) behind
// gocron's Locker: a tick's record outlives the tick by twice the skew; the
// winner also holds the job's running lock, kept alive while the job runs,
// so that a long run skips the next ticks everywhere instead of overlapping
// them. A run that does not go ahead fails Lock with an error that gocron
// hands to the job's AfterLockError listener: redlock.ErrLocked when
// another replica has the tick or the run. Every run is reported as a
// scheduler.Event (scheduler.WithObserver); changes of a job's state are
// logged once where scheduler.WithLogger says.
//
// gocron's singleton and limit modes (WithSingletonMode,
// WithLimitConcurrentJobs) work beside it, each local to its scheduler:
// gocron calls Lock once the mode lets a run go ahead there.
//
// How ticks are told for interval and cron jobs, how the modes combine with
// the locker, and what this does not cover: docs/guide/CRON.md, section "gocron
// v2".
package gocronlock
