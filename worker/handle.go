package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// Handle registers h for taskType, each task locked on the resource named by
// key (see the middleware package) with the configured TTL and conflict
// policy, its busy tasks parked in the broker. At most WORKER_CONCURRENCY
// tasks try for their locks or run at once, across task types; asynq takes
// up to WORKER_WAIT_ROOM more, and a task waiting for a busy lock waits
// among those (middleware.WithRoom): never more than WORKER_WAIT_ROOM wait at
// once, each hot resource an equal share. opts come after those (a
// middleware.WithObserver among them replaces the one feeding the worker's
// task metrics). A nil key runs the handler unlocked. Every task runs in a
// span asynq.task when tracing is on (see New). Handle must be called
// before Run.
func (w *Worker) Handle(taskType string, h asynq.Handler, key middleware.KeyFunc, opts ...middleware.Option) error {
	if taskType == "" || h == nil {
		return fmt.Errorf("worker: Handle needs a task type and a handler (got %q, %v)", taskType, h)
	}
	if w.running.Load() {
		return errors.New("worker: Handle called after Run")
	}
	if key == nil {
		// Unlocked tasks take the room's run places too.
		h = middleware.Lock(w.locks, noLock, w.room, middleware.WithLogger(w.log))(h)
	} else {
		policy, _ := w.cfg.policy()
		all := append([]middleware.Option{
			middleware.WithTTL(w.cfg.LockTTL),
			middleware.WithCompletionWindow(w.cfg.CompletionWindow),
			policy,
			middleware.WithBroker(w.ping),
			w.room,
			middleware.WithLogger(w.log),
			middleware.WithObserver(w.metrics.observeTask),
		}, w.cfg.limitOf(taskType)...)
		all = append(all, opts...)
		if w.traces != nil {
			all = append([]middleware.Option{middleware.WithTracerProvider(w.traces)}, all...)
		}
		mw, err := middleware.New(w.locks, key, all...)
		if err != nil {
			return fmt.Errorf("worker: %s: %w", taskType, err)
		}
		h = mw(w.holding(h))
	}
	w.mux.Handle(taskType, w.taskSpans(w.track(nameHolder(h))))
	return nil
}

// noLock is the key of tasks that take no lock.
func noLock(context.Context, *asynq.Task) (string, error) { return "", nil }

// track counts handlers that have not returned, so that shutdown can wait
// for their locks to be released even after asynq stopped waiting.
func (w *Worker) track(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		w.inflight.Add(1)
		defer w.inflight.Done()
		return h.ProcessTask(ctx, t)
	})
}

// holding counts the handlers running under their lock (inside the lock
// middleware): asynqlock_locks_held.
func (w *Worker) holding(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		w.metrics.held.Inc()
		defer w.metrics.held.Dec()
		return h.ProcessTask(ctx, t)
	})
}
