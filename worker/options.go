package worker

import (
	"log/slog"

	"github.com/hibiken/asynq"
)

// Option configures a Worker beyond its Config.
type Option func(*options)

type options struct {
	log   *slog.Logger
	asynq *asynq.Config
	mux   *asynq.ServeMux
}

// WithLogger sets the worker's logger, which also receives asynq's lines and
// go-redis's (go-redis has one logger per process: New sets it). Default
// (and nil): slog.Default(), which New first replaces with a logger to
// stderr built from LOG_LEVEL and LOG_FORMAT, so that lines written with the
// log package join the same stream.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithAsynqConfig gives the worker's asynq server an existing application's
// settings: task aggregation (GroupAggregator and the Group* bounds),
// ErrorHandler, HealthCheckFunc, BaseContext, the janitor's, and its own
// RetryDelayFunc and IsFailure, which run after the middleware's: a busy
// task's conflict keeps the middleware's short delay and is never a
// failure, every other error gets the application's. What the worker sizes
// and logs from its Config (Concurrency, Queues, StrictPriority,
// ShutdownTimeout, the task check intervals, Logger, LogLevel) stays its
// own: a cfg that sets any of them is refused by New, naming the variable
// to set instead. Default: none.
func WithAsynqConfig(cfg asynq.Config) Option { return func(o *options) { o.asynq = &cfg } }

// WithServeMux serves mux: Handle registers the worker's locked handlers on
// it, beside the application's own (which run unlocked, in the worker's run
// places as Handle's unlocked handlers do not: register those with Handle
// and a nil key to count them). Default: a mux of the worker's own.
func WithServeMux(mux *asynq.ServeMux) Option { return func(o *options) { o.mux = mux } }
