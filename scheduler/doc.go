// Package scheduler runs robfig/cron v3 jobs as singletons across the
// replicas of a service: every replica runs the same cron table, and each
// tick of a job runs at most once in the whole fleet, even when the job
// takes a millisecond and the replicas' clocks are offset from the lock
// nodes' by up to a configured skew, ahead or behind. A long job keeps its
// lock alive, learns of its loss through its context, and never overlaps
// its own next tick. A bridge enqueues an asynq task on each tick exactly
// once across replicas.
//
// Two ways in:
//
//   - [Singleton] is a cron.JobWrapper, written as any robfig wrapper:
//     cron.NewChain(scheduler.Singleton(locks, "report")).Then(job), or
//     cron.New(cron.WithChain(scheduler.Singleton(locks, "svc"))) for every
//     job of a cron. It needs no schedule. [NewSingleton] is the same with
//     an error result.
//   - [Scheduler] wraps a cron.Cron for named func(ctx) error jobs:
//     [New], [Scheduler.Register], [Scheduler.RegisterTask] (the asynq
//     bridge), [Scheduler.Start], [Scheduler.Stop], [Scheduler.Entries].
//     Specs have an optional seconds field and CRON_TZ= prefix; the others
//     are in UTC unless [WithLocation] says otherwise.
//
// All locks come from a [redlock.Client], through its public API only.
// Input that cannot work is refused where it is made: an error from
// NewSingleton, Register and New, a panic from Singleton.
//
// # Which tick a run belongs to
//
// A cron.Job's Run does not say which activation it is for. robfig's
// schedules all activate on whole seconds, and its cron never runs a job
// before the activation by its own clock, so a Singleton given no schedule
// takes the whole second at or before the run's start as its tick. Each
// replica reads its own clock, on which its cron fired: replicas whose
// clocks differ agree on the tick's name, and run it at moments at most
// twice the skew apart. This holds while a run starts less than the skew
// (and less than a second) after its activation: put Singleton first in
// the chain. A run later than the skew is skipped ([OutcomeSkippedNoTick]).
//
// With a schedule ([WithSpec], [WithSchedule], and always in a
// [Scheduler]) the tick is the latest activation at or before the run's
// start within the skew, and tick records are kept for most of the
// interval. robfig's "@every d" counts from each cron's start, so replicas
// do not share its ticks: Singleton refuses it ([ErrInvalidSpec], naming
// the way out), and [Parse] and [Scheduler.Register] read it as
// [EverySchedule], which activates at the multiples of d since the Unix
// epoch on every replica. Give a Singleton cron scheduler.Every(d) for the
// same effect.
//
// # Each tick at most once, and remembered
//
// A run first takes the tick's lock, resource "cron:<name>:<tick in Unix
// ms>", with one Redlock attempt retried for max(skew, 250ms)/2 (contenders
// that fire together can split the nodes so that nobody wins the first
// attempt). A replica that finds it held skips the tick
// ([OutcomeSkippedOtherReplica], logged at Debug).
//
// The winner never releases the tick lock: it is the record of the tick
// and expires with its TTL, the longest of the running-lock TTL,
// 2·skew + 2·max(skew, 250ms), nine tenths of the schedule's interval (for
// a Singleton without a schedule, of the interval between its last two
// ticks), and the catch-up deadline plus the window. A 1ms job is thus not
// run again by a replica that starts the same tick up to twice the skew
// later (the classic failure, reproduced by the tests with a naive lock).
// A tick lock won more than max(skew, 250ms) after the run started (slow
// lock nodes) is given up without running ([OutcomeLockError]): an earlier
// winner's record might have expired. A replica that finds a record won
// earlier than any replica within the skew could have started the tick
// (its remaining TTL tells its age) still skips it, at Warn
// ([OutcomeSkippedBeyondSkew]): its clock or the winner's is offset beyond
// the skew. One key per job lives at a time (more with catch-up).
//
// # Clock offsets
//
// Each replica measures its clock offset to every lock node (the node's
// TIME against its own tick clock, see [WithClock]) when a Scheduler starts
// and then at most once a minute while jobs run, warns once per node when
// the offset goes above half the skew (and says when it is back), and hands
// each measurement to [WithClockObserver], e.g. for a metric.
//
// # Catch-up
//
// With [WithCatchUp](deadline) on a Scheduler, Start (and Register after
// Start) looks at the latest activation of each job within the deadline
// before now. If no replica ran it (no record), it runs now, once, on the
// first replica that tries ([OutcomeCaughtUp], Warn, then the run's
// outcome). Older missed ticks are not run: a job that missed three ticks
// runs once. A first deployment counts as an outage: its latest tick within
// the deadline runs. All replicas must have the same deadline.
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
// attempts have budgets, delays a maximum, records a TTL.
//
// # Several jobs under one wrapper
//
// A wrapper installed with cron.WithChain applies to every job of the cron.
// Each job gets its own name and locks: the first is named as the wrapper,
// the others "<name>#2", "<name>#3" in the order they are added (the same
// on every replica running the same table), and a job wrapped with [Named]
// "<name>/<its name>", which is stable when jobs are added or removed.
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
// # Time zones
//
// Specs without CRON_TZ= are in UTC by default, so that replicas in
// different zones run a daily job at the same instant. In a zone with
// daylight saving time, as with robfig/cron, a job whose time the clock
// springs over is skipped that day, and one whose time it falls back over
// runs twice that day (two ticks, each once across replicas).
//
// # Reporting
//
// Every run is logged with log/slog ([WithLogger], default slog.Default():
// Info for runs, Debug for ticks taken by another replica, Warn for skips,
// late (caught-up) ticks and records found beyond the skew, Error for
// failures and panics) with the job, tick, outcome, replica, duration and
// error, and reported as an [Event] to the hook set by [WithObserver].
// [Scheduler.Entries] shows each job's next and previous activation and
// its last outcome on this replica. Lock-level events come from the
// redlock client's own observer. A job's panic is recovered, reported
// ([OutcomePanicked], [PanicError] with the stack) and does not stop the
// scheduler; its running lock is released.
//
// # Assumptions
//
// The at-most-once guarantee is the Redlock lock's (see package redlock): it
// holds while each replica's clock offset plus delivery delay stays within
// the skew, the lock nodes keep their data for the TTLs in use, and a
// replica is not paused past its lock's validity.
package scheduler
