package middleware

import (
	"context"
	"log/slog"
)

// taskLog logs with the task's ID, type and resource; it builds the
// attributes only when a line is actually written (not once per task).
type taskLog struct {
	l            *slog.Logger
	id, typ, res string
}

func (t taskLog) log(level slog.Level, msg string, args ...any) {
	if !t.l.Enabled(context.Background(), level) {
		return
	}
	t.l.Log(context.Background(), level, msg, append([]any{"task_id", t.id, "task_type", t.typ, "resource", t.res}, args...)...)
}

func (t taskLog) Debug(msg string, args ...any) { t.log(slog.LevelDebug, msg, args...) }
func (t taskLog) Warn(msg string, args ...any)  { t.log(slog.LevelWarn, msg, args...) }
func (t taskLog) Error(msg string, args ...any) { t.log(slog.LevelError, msg, args...) }
