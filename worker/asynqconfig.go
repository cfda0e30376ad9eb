package worker

import (
	"errors"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// checkApp refuses application asynq settings (WithAsynqConfig) that set
// what the worker takes from its Config, naming the variable that sets it,
// or that asynq.NewServer would panic on at Run.
func checkApp(app *asynq.Config) []problem {
	var ps []problem
	add := func(set bool, field, v string) {
		if set {
			ps = append(ps, problem{Var: v, Message: "WithAsynqConfig sets asynq.Config." + field + ", which the worker sets from " + v + ": leave it out and set " + v})
		}
	}
	add(app.Concurrency != 0, "Concurrency", "WORKER_CONCURRENCY")
	add(app.Queues != nil, "Queues", "WORKER_QUEUES")
	add(app.StrictPriority, "StrictPriority", "WORKER_STRICT_PRIORITY")
	add(app.ShutdownTimeout != 0, "ShutdownTimeout", "WORKER_SHUTDOWN_TIMEOUT")
	add(app.TaskCheckInterval != 0, "TaskCheckInterval", "WORKER_TASK_CHECK_INTERVAL")
	add(app.DelayedTaskCheckInterval != 0, "DelayedTaskCheckInterval", "WORKER_DELAYED_TASK_CHECK_INTERVAL")
	add(app.Logger != nil, "Logger", "LOG_FORMAT (and worker.WithLogger)")
	add(app.LogLevel != 0, "LogLevel", "LOG_LEVEL")
	if app.GroupGracePeriod > 0 && app.GroupGracePeriod < time.Second {
		ps = append(ps, problem{Var: "WithAsynqConfig", Message: "asynq.Config.GroupGracePeriod is " + app.GroupGracePeriod.String() + ": asynq needs at least 1s (or 0 for its default)"})
	}
	return ps
}

// serverConfig is the asynq configuration of the worker: the application's
// (WithAsynqConfig, or none) with the worker's own fields, and the
// middleware's failure and retry rules in front of the application's.
func (w *Worker) serverConfig(lvl asynq.LogLevel) asynq.Config {
	var c asynq.Config
	if w.app != nil {
		c = *w.app
	}
	c.Concurrency, c.Queues, c.StrictPriority = w.cfg.workers(), w.cfg.Queues, w.cfg.StrictPriority
	c.ShutdownTimeout, c.TaskCheckInterval, c.DelayedTaskCheckInterval = w.cfg.ShutdownTimeout, w.cfg.TaskCheckInterval, w.cfg.DelayedTaskCheckInterval
	c.Logger, c.LogLevel = asynqLogger{w.once.Logger(w.log, "asynq")}, lvl
	c.IsFailure = chainIsFailure(c.IsFailure)
	c.RetryDelayFunc = chainRetryDelay(c.RetryDelayFunc)
	return c
}

// chainIsFailure is middleware.IsFailure, then the application's own (nil:
// none) for what the middleware counts as a failure.
func chainIsFailure(app func(error) bool) func(error) bool {
	if app == nil {
		return middleware.IsFailure
	}
	return func(err error) bool { return middleware.IsFailure(err) && app(err) }
}

// chainRetryDelay is middleware.RetryDelay for the middleware's own returns
// (a conflict, a lost lease: see RetryDelay's doc), the application's (nil:
// asynq's default) for every other error.
func chainRetryDelay(app asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if app == nil {
		return middleware.RetryDelay
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		if !middleware.IsFailure(err) || errors.Is(err, asynq.ErrLeaseExpired) {
			return middleware.RetryDelay(n, err, t)
		}
		return app(n, err, t)
	}
}
