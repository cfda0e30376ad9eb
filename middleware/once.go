package middleware

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// DefaultCompletionWindow is how long a task's completion record is kept
// (WithCompletionWindow): past asynq's re-delivery of a task whose
// completion the broker could not record (its lease, 30s, expires; the
// recoverer, every minute, puts it back; it runs after its retry delay),
// with room for a broker outage of most of an hour.
const DefaultCompletionWindow = time.Hour

// defaultWindow is the window a middleware starts with: a seam for the
// package's tests, whose fake metadata gives every task the same ID.
var defaultWindow = DefaultCompletionWindow

// WithCompletionWindow sets how long the record of a task whose handler
// returned nil under its lock is kept on the lock nodes (docs/RELIABILITY.md,
// "Once"). A delivery of the same task (its original ID, type and payload;
// a parked copy counts as its original) that finds the record completes
// without running the handler. 0 writes and looks for no record (asynq's
// at-least-once delivery: a task whose completion the broker missed runs
// again). Each record takes about 150 bytes on every lock node for its
// window (docs/OPERATIONS.md). A negative window, or one above
// redlock.MaxCompletionWindow, is refused. Default: DefaultCompletionWindow.
func WithCompletionWindow(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > redlock.MaxCompletionWindow {
			c.err = fmt.Errorf("middleware: completion window must be in [0, %v], got %v", redlock.MaxCompletionWindow, d)
			return
		}
		c.window = d
	}
}

// TaskKeyFromContext returns the task's stable key: the ID it was enqueued
// with, the same for every delivery and for a parked copy (whose ID adds
// "~rN"). A handler that writes to its own store makes its effect
// idempotent with it: apply only if (resource, key) was not applied yet, in
// the same transaction or script as the effect. That closes the window the
// completion record leaves (a worker killed after the handler returned,
// before the release). False outside an asynq server.
func TaskKeyFromContext(ctx context.Context) (string, bool) {
	id, ok := asynq.GetTaskID(ctx)
	if !ok || id == "" {
		return "", false
	}
	return originalID(id), true
}

// originalID is the ID a task was first enqueued with: a parked copy's
// "id~rN" is "id".
func originalID(id string) string {
	if i := strings.LastIndex(id, resubmitMark); i > 0 && isDigits(id[i+len(resubmitMark):]) {
		return id[:i]
	}
	return id
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// recordID names a task's completion record: its original ID and a hash of
// its type and payload, so that an ID reused for other work (asynq.TaskID
// after the first task is gone) is not taken for the first.
func recordID(id string, t *asynq.Task) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.Type()))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(t.Payload())
	var sum [8]byte
	return originalID(id) + "/" + hex.EncodeToString(h.Sum(sum[:0]))
}

// lockOptsFor are the lock options of one task: the middleware's, and its
// completion record's when it has an ID and records are on.
func (m *mw) lockOptsFor(t *asynq.Task, meta taskMeta) []redlock.LockOption {
	if m.cfg.window <= 0 || meta.id == "" {
		return m.cfg.lockOpts
	}
	opts := make([]redlock.LockOption, len(m.cfg.lockOpts), len(m.cfg.lockOpts)+1)
	copy(opts, m.cfg.lockOpts)
	return append(opts, redlock.WithCompletion(recordID(meta.id, t), m.cfg.window))
}

// skipCompleted ends a run whose acquisition found the task's completion
// record: an earlier delivery's handler returned nil, and asynq delivered
// it again because the broker could not record that. The handler does not
// run; the lock is released and the task completes.
func (r *taskRun) skipCompleted(ctx context.Context) error {
	m := r.m
	r.log.Debug("task already completed under its lock: not run again")
	m.observe(r.event(EventRedeliverySkipped, nil))
	taskEvent(ctx, eventSkipped, attrResource.String(r.res))
	queue, res := r.meta.queue, r.res
	r.release(ctx, func() { m.promoteAfter(queue, res) })
	return nil
}

// recordCompletion has the lock's release write the task's completion
// record: its handler returned nil and the lock was kept to its end.
func (r *taskRun) recordCompletion() {
	if r.lock == nil || r.m.cfg.window <= 0 || r.meta.id == "" {
		return
	}
	if err := r.lock.RecordCompletion(); err != nil {
		// Lost at the very end: no record, and asynq may run it again.
		r.log.Debug("no completion record written", "err", err)
	}
}
