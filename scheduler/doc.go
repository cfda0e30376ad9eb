// Package scheduler runs robfig/cron v3 jobs as singletons across the
// replicas of a service: every replica runs the same cron table, and each
// tick of a job runs at most once in the whole fleet, even when the job
// takes a millisecond and the replicas' clocks or tick deliveries differ by
// up to a configured skew. A long job keeps its lock alive, learns of its
// loss through its context, and never overlaps its own next tick. A bridge
// enqueues an asynq task on each tick exactly once across replicas.
//
// Two ways in:
//
//   - [Singleton] is a cron.JobWrapper for your own cron.Cron
//     (cron.NewChain(scheduler.Singleton(locks, "report",
//     scheduler.WithSpec(spec))).Then(job)). It must be told the job's
//     schedule ([WithSpec] or [WithSchedule]); [NewSingleton] is the same
//     with an error result.
//   - [Scheduler] wraps a cron.Cron for named func(ctx) error jobs:
//     [New], [Scheduler.Register], [Scheduler.RegisterTask] (the asynq
//     bridge), [Scheduler.Start], [Scheduler.Stop]. Specs have an optional
//     seconds field and CRON_TZ= prefix; [WithLocation] sets the zone of the
//     others.
//
// All locks come from a [redlock.Client], through its public API only.
//
// # Which tick a run belongs to
//
// A cron.Job's Run does not say which activation it is for, so each run
// works it out from the schedule and the local clock: the activation t with
// now−skew ≤ t ≤ now, or, failing that, the next activation if it is at most
// "early" ahead, where early = min(skew, (interval−skew)/2) covers crons
// whose wall clock was slewed and fire a hair early. The skew must be
// smaller than the smallest interval of the schedule (checked over its next
// 100 activations; [ErrSkewTooLarge] otherwise), so at most one activation
// qualifies and replicas whose runs start anywhere within the skew of the
// tick agree on it. A run outside every window is skipped and reported
// ([OutcomeSkippedNoTick], [ErrNoTick]) rather than guessed.
//
// cron's own "@every d" schedule counts from each cron's start, so replicas
// would disagree about its activations: [Parse], [WithSpec] and
// [Scheduler.Register] turn it into [EverySchedule], which activates at the
// multiples of d since the Unix epoch. With Singleton, give your cron the
// same schedule ([Parse] or [Every]) or it will not fire on those ticks.
//
// # Each tick at most once, and remembered
//
// A run first takes the tick's lock, resource "cron:<name>:<tick in Unix
// ms>", with one Redlock attempt retried for a short budget (contenders that
// fire together can split the nodes so that nobody wins the first attempt).
// A replica that finds it held skips the tick ([OutcomeSkippedOtherReplica]).
//
// The winner does not release the tick lock when the job ends: a 1ms job
// would otherwise let a replica that starts the same tick a few hundred
// milliseconds later run it again (the classic failure, reproduced by the
// integration tests with a naive lock). The lock is kept for
// hold = skew + max(skew, 250ms) after it was won, measured on the winner's
// monotonic clock, then released in the background; its TTL, max(ttl,
// 2·hold), covers that window without extension, so if the winner dies the
// keys still outlive it. Since every replica starts the tick within the
// skew of the earliest one, and the winner won after the earliest start,
// every contender has tried before the lock goes: a contender starts its
// last attempt within max(skew, 250ms)/2 of its own start, and a tick lock
// that was won more than max(skew, 250ms) after the run started (slow lock
// nodes) is given up without running the tick ([OutcomeLockError]), since
// it might have been won after an earlier winner let it go. Nothing else is
// stored: the tick lock is the memory of a finished tick.
//
// # Overlap and long jobs
//
// The winner of a tick then takes the job's running lock,
// "cron:<name>:running", with TTL [WithTTL] (default 5s), keeps it alive
// ([redlock.Lock.KeepAlive]) while the job runs and releases it when the job
// returns. The job's context is that keep-alive context: it is cancelled
// with cause [redlock.ErrLockLost] if the lock can no longer be proven held
// (before its validity ends), and with [ErrStopped] when a Scheduler's Stop
// runs out of time. If the running lock is held, by this replica or another,
// the tick is skipped ([SkipIfRunning], the default; [OutcomeSkippedOverlap])
// or, with [DelayIfRunning], waits for the release (woken at once by
// redlock's release notification) for at most [WithMaxDelay] (default: the
// schedule's interval) from its start. A delayed tick still counts as that
// tick: it holds the tick lock while waiting, so it runs once across
// replicas. Waiting ticks are not ordered across replicas.
//
// If the replica running a job dies (or is cut off from the lock nodes), its
// keep-alive stops, the running lock expires within the TTL, and the
// following ticks run on other replicas. No run waits without bound: lock
// attempts have budgets, delays a maximum, holds a fixed length.
//
// # The asynq bridge
//
// [Scheduler.RegisterTask] and [EnqueueJob] enqueue a task on each tick,
// under the tick lock only (an enqueue cannot overlap anything), with
// asynq.TaskID([TaskID](name, tick)) and asynq.Retention of at least the
// tick window (default [DefaultRetention], one minute). A replica that tries
// the tick again while the task exists, completed tasks included, gets
// asynq.ErrTaskIDConflict, reported as [OutcomeAlreadyEnqueued] and not as
// an error. Should the lock nodes be unreachable, the bridge still enqueues
// and relies on the task ID alone: a lock outage does not lose ticks. An
// [Enqueuer] is anything with asynq.Client's EnqueueContext method.
//
// # Reporting
//
// Every run is logged with log/slog ([WithLogger], default slog.Default():
// Info for runs, Debug for ticks taken by another replica, Warn for skips,
// Error for failures and panics) with the job, tick, outcome, duration and
// error, and reported as an [Event] to the hook set by [WithObserver].
// Lock-level events (acquisitions, extensions, losses, node errors) come
// from the redlock client's own observer. A job's panic is recovered,
// reported ([OutcomePanicked], [PanicError] with the stack) and does not
// stop the scheduler; its running lock is released.
//
// # Names with cron.WithChain
//
// A wrapper installed with cron.WithChain applies to every job of the cron,
// and cannot see their schedules. Give it no schedule and wrap each job with
// [Named]: the job's name becomes "<wrapper name>/<job name>" and its ticks
// come from the schedule it carries. A job that is not Named then never runs
// and is reported as misconfigured. The simpler way is one Singleton per job
// with cron.NewChain.
//
// # Assumptions
//
// The at-most-once guarantee is the Redlock lock's (see package redlock): it
// holds while the skew bound holds (runs of one tick start within the skew
// of each other), the lock nodes keep their data for the TTLs in use, and a
// replica is not paused past its lock's validity.
package scheduler
