// Package middleware makes asynq task handlers hold a Redlock lock per
// resource while they run, so that tasks for the same resource (an SKU, an
// account) never run at the same time:
//
//	locks, err := redlock.NewFromURLs(nodeURLs)
//	mux := asynq.NewServeMux()
//	mux.Use(middleware.Lock(locks, middleware.ByField("sku"),
//		middleware.WithBroker(brokerRedis), // park busy tasks, last retries too
//		middleware.WithRollback(undo),      // runs under the lock on failure or loss
//	))
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:      middleware.IsFailure,  // a conflict is not a failure...
//		RetryDelayFunc: middleware.RetryDelay, // ...and comes back soon
//	})
//
// Around each task the middleware derives a key ([ByField], [ByType],
// [ByPayloadHash] or your [KeyFunc]; an empty key runs the task without a
// lock), holds "task:<type>:<key>" while the handler runs (its context is
// cancelled with redlock.ErrLockLost if the lock is lost; [LockFromContext]
// reads it) and releases it once the handler has returned.
//
// When another task holds the resource, an option decides: [Wait] (the
// default, 2s), [Requeue], [Skip] or [Fail]; a conflict never consumes the
// task's retry budget. A task whose key cannot be derived is archived
// (asynq.SkipRetry) with the reason. The behaviour in depth (waiting,
// parking and promotion of hot resources, last retries, rollback, progress
// mode) is in docs/guide/MIDDLEWARE.md and docs/guide/HOTKEYS.md.
package middleware
