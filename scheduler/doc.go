// Package scheduler runs robfig/cron v3 jobs as singletons across the
// replicas of a service: each tick of a job runs at most once in the whole
// fleet, even for a job of a millisecond and clocks offset from the lock
// nodes' by up to the skew ([WithSkew], default 1s). A long job keeps its
// lock alive, learns of its loss through its context, and never overlaps
// its own next tick.
//
//	c := cron.New(cron.WithSeconds())
//	c.AddJob("*/10 * * * * *", cron.NewChain(scheduler.Singleton(locks, "report")).Then(job))
//
// A job is any cron.Job, [Func] (it takes the run's context) or [EnqueueJob]
// (an asynq task enqueued once per tick). A [Scheduler] runs named jobs on
// specs in UTC, can catch up a tick every replica missed ([WithCatchUp]) and
// shows each job's runs ([Scheduler.Entries]):
//
//	s, _ := scheduler.New(locks)
//	s.Register("cleanup", "0 */5 * * * *", cleanup)
//	s.RegisterTask("sync", "@every 30s", asynqClient, asynq.NewTask("prices:sync", nil))
//	s.Start()
//	defer s.Stop(ctx)
//
// [NewJobs] is the same core for a cron library that starts runs on its own
// timers (package gocronlock). Every run is an [Event] ([WithObserver]);
// changes of a job's state are logged once ([WithLogger]). How ticks are
// named, recorded and caught up: docs/guide/CRON.md; why each runs at most
// once: docs/design/SCHEDULER-PROOF.md.
package scheduler
