package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/hibiken/asynq"
)

// Completed copies are kept (asynq's Retention) for as long as the run that
// resubmitted them may still look for them, and a margin: see copyRetention.
const (
	copyKeepMargin  = time.Minute
	copyKeepDefault = 30 * time.Minute // asynq's default task timeout
)

// errInspectTimeout is an inspector call that did not answer in time.
var errInspectTimeout = errors.New("no answer from the broker within the resubmission timeout")

// resubmit enqueues a copy of the task under the derived ID id (see copyID;
// so that a crash between resubmitting and revoking cannot make two
// copies), in the same queue with the same retry budget (and, with an
// inspector, the same timeout, deadline and retention), after a conflict
// delay. A failed enqueue is tried once more: the derived ID makes a repeat
// safe, and a copy stored by the first try despite its error then shows as
// a conflict on the ID, unless a marker holds the ID (errClaimed).
func (r *taskRun) resubmit(ctx context.Context, id string, busy *conflictError) error {
	m, meta := r.m, r.meta
	d, _ := conflictDelay(busy)
	// The copy keeps what is left of the retry budget (nothing, on a last
	// retry): conflicts never consume it, and a resubmission must not
	// refill it.
	opts := []asynq.Option{asynq.TaskID(id), asynq.MaxRetry(max(meta.maxRetry-meta.retried, 0)), asynq.ProcessIn(d)}
	if meta.queue != "" {
		opts = append(opts, asynq.Queue(meta.queue))
	}
	extra, retention := r.originalOptions()
	opts = append(opts, extra...)
	opts = append(opts, asynq.Retention(max(retention, copyRetention(ctx))))
	task := asynq.NewTaskWithHeaders(r.t.Type(), r.t.Payload(), copyHeaders(r.t, meta.run()))
	var err error
	for range 2 {
		ectx, cancel := lockutil.Detached(ctx)
		_, err = m.cfg.enqueuer.EnqueueContext(ectx, task, opts...)
		cancel()
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return r.notMarker(id)
		}
		if err == nil {
			return nil
		}
	}
	return err
}

// warnResubmit logs failing resubmissions once per change of state, as
// warnPark does for parking: the first failure at Warn with its cause and
// the broker's address, the first success after it at Info. Each task's
// outcome in between is logged at Debug (resubmitOrClaim); a broker that
// fails fails every task alike, and a line per task would bury the one
// that says so. A failed try of parkCopy does not count: the last-retry
// path tries again and tells.
func (m *mw) warnResubmit(res string, err error) {
	m.brokerState(&m.resubErr, res, err, "cannot resubmit busy tasks on their last retry: each waits for its lock instead, or is archived when the broker cannot tell whether its copy was stored", "resubmitting busy tasks on their last retry again")
}

// errClaimed is a resubmission refused because a marker holds the copy's
// ID: an earlier delivery of the task claimed it (claimCopyID), and a copy
// can never be stored under it.
var errClaimed = errors.New("the copy's ID is claimed by a marker of an earlier delivery")

// notMarker tells, after a conflict on id, a copy (stored by an earlier try
// or delivery of this task: nil) from a marker (errClaimed), which carries
// no task: taking it for a stored copy would revoke the run and lose the
// task. copyID steps over markers, but its lookup may have failed. A lookup
// that cannot tell counts as a copy, as before markers existed.
func (r *taskRun) notMarker(id string) error {
	if r.m.cfg.inspector == nil || r.meta.queue == "" {
		return nil
	}
	if info, err := r.lookupCopy(id); err == nil && isMarker(info) {
		return errClaimed
	}
	return nil
}

// copyRetention is how long a completed copy stays in the broker: as long
// as the resubmitting run may still wait for its lock (its deadline) and a
// margin. A failed resubmission whose copy was stored all
// the same may complete before that run claims the copy's ID; the copy
// then still holds the ID (see claimCopyID) instead of leaving it free,
// which would look like "never stored" and make the run do the task a
// second time. A marker holds its ID at least as long (markerRetention).
func copyRetention(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), 0) + copyKeepMargin
	}
	return copyKeepDefault + copyKeepMargin
}

// originalOptions looks up the options of the running task that asynq does
// not pass to its handler, when an inspector is configured: its timeout and
// deadline as options, and its retention.
func (r *taskRun) originalOptions() ([]asynq.Option, time.Duration) {
	m, meta := r.m, r.meta
	if m.cfg.inspector == nil || meta.queue == "" {
		return nil, 0
	}
	info, err := inspect(func() (*asynq.TaskInfo, error) { return m.cfg.inspector.GetTaskInfo(meta.queue, meta.id) })
	m.brokerState(&m.lookupErr, r.res, err, "resubmitting busy tasks without their timeout, deadline and retention: the broker lookup failed",
		"looking up busy tasks to resubmit works again")
	if err != nil {
		r.log.Debug("resubmitting without the task's timeout, deadline and retention: lookup failed", "err", err)
		return nil, 0
	}
	var opts []asynq.Option
	if info.Timeout > 0 {
		opts = append(opts, asynq.Timeout(info.Timeout))
	}
	if !info.Deadline.IsZero() {
		opts = append(opts, asynq.Deadline(info.Deadline))
	}
	return opts, info.Retention
}

// lookupCopy looks a resubmitted copy up, bounded by the resubmission
// timeout.
func (r *taskRun) lookupCopy(id string) (*asynq.TaskInfo, error) {
	insp, queue := r.m.cfg.inspector, r.meta.queue // not r: the call may outlive the run
	return inspect(func() (*asynq.TaskInfo, error) { return insp.GetTaskInfo(queue, id) })
}

// inspect runs an inspector call, which takes no context, bounded by the
// resubmission timeout; a call that does not answer in time finishes in the
// background.
func inspect[T any](f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	timer := time.NewTimer(lockutil.ReleaseTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-timer.C:
		var zero T
		return zero, errInspectTimeout
	}
}
