package middleware

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// defaultWindow is WithCompletionWindow's default; the package's tests, whose
// fake metadata gives every task the same ID, set 0.
var defaultWindow = time.Hour

// WithCompletionWindow sets how long the record of a run whose handler
// returned nil under its lock is kept on the lock nodes (about 150 bytes on
// each): a re-delivery of that run completes without running the handler; a
// fresh enqueue reusing the ID, or an operator's re-run, runs
// (docs/guide/MIDDLEWARE.md, "Once"). 0 turns records off (asynq's
// at-least-once delivery). A negative window, or one above
// lockutil.MaxCompletionWindow, is refused. Default: an hour.
func WithCompletionWindow(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > lockutil.MaxCompletionWindow {
			c.err = fmt.Errorf("middleware: completion window must be in [0, %v], got %v",
				lockutil.MaxCompletionWindow, d)
			return
		}
		c.window = d
	}
}

// TaskKeyFromContext returns the task's stable key: the ID it was enqueued
// with, the same for every delivery (an earlier version's copy "id~rN" gives
// "id"). A handler's store applies an effect only if (resource, key) was not
// applied yet, in the effect's own transaction: that closes the window the
// completion record leaves (docs/guide/RELIABILITY.md). False outside asynq.
func TaskKeyFromContext(ctx context.Context) (string, bool) {
	id, ok := asynq.GetTaskID(ctx)
	if !ok || id == "" {
		return "", false
	}
	return originalID(id), true
}

func originalID(id string) string {
	if i := strings.LastIndex(id, resubmitMark); i > 0 {
		if n := id[i+len(resubmitMark):]; n != "" && strings.Trim(n, "0123456789") == "" {
			return id[:i]
		}
	}
	return id
}

// recordID names a task's completion record: 128 bits (a record's memory is
// mostly its name) of a hash of its original ID, type and payload.
func recordID(id string, t *asynq.Task) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(originalID(id)), []byte(t.Type()), t.Payload()} {
		_, _ = h.Write(part)
		_, _ = h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:16])
}

// lockOptsFor are a task's lock options, its completion record's among them.
func (m *mw) lockOptsFor(t *asynq.Task, meta taskMeta) []redlock.LockOption {
	if m.cfg.window <= 0 || meta.id == "" {
		return m.cfg.lockOpts
	}
	completion := lockutil.Completion(recordID(meta.id, t), m.cfg.window).(redlock.LockOption)
	return append(slices.Clip(m.cfg.lockOpts), completion)
}

// skipCompleted ends the run, and reports true, when the acquisition found
// the completion record of a run below this delivery's (a re-delivery); any
// other record is forgotten and the task runs.
func (r *taskRun) skipCompleted(ctx context.Context) bool {
	rec := lockutil.MechanicsOf(r.lock)
	run := rec.CompletedRun()
	if run < 0 {
		return false
	}
	if r.runNo() <= run {
		_ = rec.ForgetCompletion() // refused only for a lost lock, which writes nothing
		return false
	}
	r.log.Debug("task already completed under its lock: not run again")
	if w := r.t.ResultWriter(); w != nil {
		msg := fmt.Sprintf("asynqlock: re-delivery of run %d (asynq retry count), which completed "+
			"under its lock at %s; handler not run", run, rec.CompletedAt().UTC().Format(time.RFC3339Nano))
		if _, err := w.Write([]byte(msg)); err != nil {
			r.log.Debug("skip not written to the task's result", "err", err)
		}
	}
	r.m.observe(r.event(kindRedeliverySkipped, nil))
	taskEvent(ctx, eventSkipped, attrResource.String(r.res))
	r.release(ctx)
	return true
}

// recordCompletion has the release write this run's completion record.
func (r *taskRun) recordCompletion() {
	if r.lock == nil || r.m.cfg.window <= 0 || r.meta.id == "" {
		return
	}
	if err := lockutil.MechanicsOf(r.lock).RecordCompletion(r.runNo()); err != nil { // lost at the end
		r.log.Debug("no completion record written", "err", err)
	}
}

// An earlier version's copies of last retries ("id~rN", with the runs before
// in retriedHeader) and their markers: still read, so that those queued
// before an upgrade run as meant.
const (
	resubmitMark  = "~r"
	retriedHeader = "asynqlock-retried"
	markerHeader  = "asynqlock-claimed-by"
)

// runNo numbers this delivery (the completion record's run): asynq's retry
// count, a copy's counting on from its original's.
func (r *taskRun) runNo() int {
	prior, err := strconv.Atoi(r.t.Headers()[retriedHeader])
	if err != nil || prior < 0 {
		prior = 0
	}
	return prior + r.meta.retried
}
