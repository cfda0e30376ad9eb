// Package middleware makes asynq task handlers hold a Redlock lock per
// resource while they run.
//
//	mux := asynq.NewServeMux()
//	mux.Use(middleware.Lock(locks, middleware.ByField("sku")))
//
// Around each task the middleware derives a key from the task ([KeyFunc]; an
// empty key runs the handler without a lock), acquires the lock on
// "<prefix><task type>:<key>", keeps it alive while the handler runs (the
// handler's context is cancelled with cause [redlock.ErrLockLost] the moment
// the lock is lost), and releases it when the handler returns — with a
// context of its own, so a task whose asynq deadline passed still releases,
// and never before the handler has returned, even if asynq stopped waiting
// for it.
//
// # Conflicts
//
// When another task holds the resource, a [Policy] decides: [Wait] blocks up
// to a bound (woken as soon as the holder releases) and then requeues;
// [Requeue] returns an error that asynq retries after a short jittered delay
// without consuming the task's retry budget, provided the server is
// configured with [IsFailure] and [RetryDelay]; [Skip] completes the task
// without running it; [Fail] archives it with asynq.SkipRetry. The default
// is Wait(2s). At most two tasks per resource per process wait (see
// [WithMaxWaiters]), so workers never all sit blocked on one hot resource
// while other resources' tasks wait in the queue.
//
// # Hot resources
//
// With [WithParking] (a client to the asynq broker; worker.New passes it), a
// task past the waiters' bound is parked once: it stays in asynq's retry set
// with a backstop delay, recorded in a per-resource FIFO next to its queue's
// keys, and is moved back to its queue when a task of its resource starts or
// ends, so that it waits, already in a worker, for its turn. A parked task is
// never parked again, a stale record never re-runs a completed task, and the
// records are hints: the backstop brings a task back by itself. Without it,
// the waiters' bound is soft: a task still waits when the tasks ahead of it
// should be done sooner than a trip through asynq's retry set. See
// docs/HOTKEYS.md.
//
// asynq archives a task that fails on its last retry (or with MaxRetry(0))
// whatever the error. A conflict must never archive a task, so on the last
// retry the middleware resubmits the task under a derived ID through the
// enqueuer given with [WithEnqueuer] (an *asynq.Client) and revokes the
// current run; with [WithInspector] (an *asynq.Inspector) the copy keeps the
// original's timeout, deadline and retention. Without an enqueuer it waits
// for the lock as long as the task's deadline allows. A resubmission that
// fails twice may still have stored its copy (a lost reply): the task then
// waits for its lock only if the inspector confirms there is no copy (and a
// copy that lands late is deleted before the task runs); otherwise it is
// archived rather than risk running twice.
//
// # Rollback, progress, lock details
//
// [WithRollback] installs a hook that runs when the handler fails or the lock
// is lost, always while the lock is held: a lost lock is re-acquired first,
// and if that fails the task fails with an error matching
// redlock.ErrLockLost so that it is retried rather than left half done.
// [WithProgress] extends the lock only while the handler reports progress
// with [Progress], so a hung handler stops holding the resource.
// [LockFromContext] gives the handler its resource, token and fencing token.
//
// A key that cannot be derived (malformed payload, missing field) fails the
// task with asynq.SkipRetry and a message naming the task type, ID and field:
// it is archived with its reason, never retried forever.
package middleware
