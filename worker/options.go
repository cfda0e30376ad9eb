package worker

import "log/slog"

// Option configures a Worker beyond its Config.
type Option func(*options)

type options struct {
	log *slog.Logger
}

// WithLogger sets the worker's logger, which also receives asynq's lines and
// go-redis's (go-redis has one logger per process: New sets it). Default
// (and nil): slog.Default(), which New first replaces with a logger to
// stderr built from LOG_LEVEL and LOG_FORMAT, so that lines written with the
// log package join the same stream.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }
