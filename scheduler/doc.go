// Package scheduler runs robfig/cron v3 jobs as singletons across the
// replicas of a service: every replica runs the same cron table, and each
// tick of a job runs at most once in the whole fleet, even for a job of a
// millisecond and replica clocks offset from the lock nodes' by up to the
// skew ([WithSkew], default 1s). A long job keeps its lock alive, learns of
// its loss through its context, and never overlaps its own next tick.
//
// A robfig user wraps a job as with any cron.JobWrapper:
//
//	c := cron.New(cron.WithSeconds())
//	c.AddJob("*/10 * * * * *", cron.NewChain(scheduler.Singleton(locks, "report")).Then(job))
//
// Use [Func] for a job that takes the run's context (cancelled with cause
// redlock.ErrLockLost if the lock is lost), [EnqueueJob] to enqueue an asynq
// task once per tick, and [Every] instead of robfig's "@every", whose ticks
// differ between replicas. [Singleton] panics with an error matching
// [ErrInvalid] when its input cannot work.
//
// A [Scheduler] runs named func(ctx) error jobs and asynq tasks on specs in
// UTC (or [WithLocation], or a CRON_TZ= prefix), can catch up a tick that
// every replica missed ([WithCatchUp]) and shows each job's next and last
// runs ([Scheduler.Entries]):
//
//	s, _ := scheduler.New(locks)
//	s.Register("cleanup", "0 */5 * * * *", cleanup)
//	s.RegisterTask("sync", "@every 30s", asynqClient, asynq.NewTask("prices:sync", nil))
//	s.Start()
//	defer s.Stop(ctx)
//
// [NewJobs] is the same core for a cron library that starts runs on its own
// timers (package gocronlock, for gocron v2).
//
// Every run is reported as an [Event] ([WithObserver]); changes of a job's state,
// not its runs, are logged where [WithLogger] says (by default slog.Default()).
// How ticks are named, recorded and caught up, and what happens on overlap, clock
// offsets and daylight saving time: docs/guide/CRON.md; why each tick runs at most once:
// docs/design/SCHEDULER-PROOF.md.
package scheduler
