package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/hibiken/asynq"
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

// redisLogger routes go-redis's internal log lines (failed dials, Sentinel
// master changes) to slog, so that LOG_FORMAT applies to them too. go-redis
// does not give them a level: lines that report a failure are Warn.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	lvl := slog.LevelInfo
	if l := strings.ToLower(msg); strings.Contains(l, "fail") || strings.Contains(l, "error") || strings.Contains(l, "panic") {
		lvl = slog.LevelWarn
	}
	r.l.Log(ctx, lvl, msg, "component", "go-redis")
}

// asynqLogger routes asynq's own logs to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) log(lvl slog.Level, args []any) {
	a.l.Log(context.Background(), lvl, strings.TrimSpace(fmt.Sprint(args...)), "component", "asynq")
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
