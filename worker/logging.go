package worker

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("must be debug, info, warn or error, got %q", s)
}

// newLogger builds the configured slog logger writing to w.
func newLogger(cfg Config, w io.Writer) *slog.Logger {
	lvl, _ := parseLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: readableDurations}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// readableDurations writes durations as "1.5s" rather than the JSON
// handler's integer nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// asynqLogger routes asynq's own logs to slog; give it a Once logger
// (component=asynq) to keep its repeated failures to one line per change.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) log(lvl slog.Level, args []any) {
	a.l.Log(context.Background(), lvl, strings.TrimSpace(fmt.Sprint(args...)))
}

func (a asynqLogger) Debug(args ...any) { a.log(slog.LevelDebug, args) }
func (a asynqLogger) Info(args ...any)  { a.log(slog.LevelInfo, args) }
func (a asynqLogger) Warn(args ...any)  { a.log(slog.LevelWarn, args) }
func (a asynqLogger) Error(args ...any) { a.log(slog.LevelError, args) }
func (a asynqLogger) Fatal(args ...any) { a.log(slog.LevelError+4, args) }

// asynqLevel maps the slog level to asynq's.
func asynqLevel(l slog.Level) asynq.LogLevel {
	switch {
	case l <= slog.LevelDebug:
		return asynq.DebugLevel
	case l <= slog.LevelInfo:
		return asynq.InfoLevel
	case l <= slog.LevelWarn:
		return asynq.WarnLevel
	}
	return asynq.ErrorLevel
}

// dependencyLogs routes the dependencies' log lines (go-redis's process-wide
// logger, OpenTelemetry's, and the log package's when the worker owns the
// default logger) through a Once, so that each is logged once per change of
// state with component=go-redis, component=otel or component=log.
func dependencyLogs(l *slog.Logger, ownsDefault bool) *workerconfig.Once {
	once := workerconfig.NewOnce(workerconfig.OnceQuiet)
	redis.SetLogger(workerconfig.RedisLog{L: once.Logger(l, "go-redis")})
	otelLogs(l, once)
	if ownsDefault {
		// After slog.SetDefault: lines written with the log package
		// (asynq's queue metrics collector) join the configured stream.
		log.SetOutput(workerconfig.LineWriter{L: once.Logger(l, "log")})
	}
	return once
}
