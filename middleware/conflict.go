package middleware

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// resubmitMark separates a task ID from its resubmission count.
const resubmitMark = "~r"

// conflict applies the policy to a task whose resource is busy (or whose
// lock nodes are unreachable). It returns a lock only when it ended up
// waiting for, and getting, the lock.
func (m *mw) conflict(ctx context.Context, t *asynq.Task, meta taskMeta, res string, cause error, start time.Time, log taskLog) (*redlock.Lock, error) {
	ev := Event{Kind: EventConflict, TaskType: t.Type(), TaskID: meta.id, Resource: res, Policy: m.cfg.policy.String(), Err: cause}
	busy := &conflictError{resource: res, cause: cause}
	if errors.Is(cause, redlock.ErrLocked) {
		busy.delay = m.pace.delay(res)
	}
	action := m.cfg.policy.action
	if errors.Is(cause, redlock.ErrQuorum) && !errors.Is(cause, redlock.ErrLocked) {
		// The lock nodes are unreachable and nobody is known to hold the
		// resource: skipping or failing would drop the task for an outage.
		// Whatever the policy, it is requeued.
		action = actRequeue
	}
	switch action {
	case actSkip:
		ev.Action, ev.Wait = "skip", time.Since(start)
		m.observe(ev)
		log.Info("task skipped: resource busy", "cause", cause)
		return nil, nil
	case actFail:
		ev.Action, ev.Wait = "fail", time.Since(start)
		m.observe(ev)
		log.Warn("task archived: resource busy", "cause", cause)
		return nil, fmt.Errorf("task %s (id %s): %w: %w", t.Type(), meta.id, busy, asynq.SkipRetry)
	}
	if !meta.budgetSpent() {
		ev.Action, ev.Wait = "requeue", time.Since(start)
		m.observe(ev)
		log.Debug("task requeued: resource busy", "cause", cause)
		return nil, busy
	}
	// Last retry: asynq archives on any error, and a conflict must not.
	if m.cfg.enqueuer != nil {
		ev.Action = "resubmit"
		err := m.resubmit(ctx, t, meta, busy, log)
		if err == nil {
			ev.Wait, ev.Err = time.Since(start), cause
			m.observe(ev)
			log.Info("busy task resubmitted on its last retry")
			return nil, fmt.Errorf("task %s (id %s) resubmitted: %w: %w", t.Type(), meta.id, busy, asynq.RevokeTask)
		}
		// Returning an error now would archive the task: wait instead.
		log.Error("could not resubmit a busy task on its last retry; waiting for its lock instead", "err", err)
		ev.Err = errors.Join(cause, err)
	}
	// No enqueuer, or it failed: wait for the lock as long as the task may run.
	ev.Action = "wait-exhausted-budget"
	lock, err := m.client.Acquire(ctx, res, m.cfg.ttl, m.lockOpts()...)
	ev.Wait, ev.Err = time.Since(start), errors.Join(ev.Err, err)
	m.observe(ev)
	if err != nil {
		log.Error("busy task on its last retry could not get its lock before its deadline", "err", err)
		return nil, fmt.Errorf("task %s (id %s) on its last retry: %w", t.Type(), meta.id, &conflictError{resource: res, cause: err})
	}
	return lock, nil
}

// resubmit enqueues a copy of the task under a derived ID (so that a crash
// between resubmitting and revoking cannot make two copies), in the same
// queue with the same retry budget (and, with an inspector, the same
// timeout, deadline and retention), after a conflict delay.
func (m *mw) resubmit(ctx context.Context, t *asynq.Task, meta taskMeta, busy *conflictError, log taskLog) error {
	d, _ := conflictDelay(busy)
	// The copy keeps what is left of the retry budget (nothing, on a last
	// retry): conflicts never consume it, and a resubmission must not
	// refill it.
	opts := []asynq.Option{asynq.TaskID(nextID(meta.id)), asynq.MaxRetry(max(meta.maxRetry-meta.retried, 0)), asynq.ProcessIn(d)}
	if meta.queue != "" {
		opts = append(opts, asynq.Queue(meta.queue))
	}
	opts = append(opts, m.originalOptions(meta, log)...)
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_, err := m.cfg.enqueuer.EnqueueContext(ectx, asynq.NewTaskWithHeaders(t.Type(), t.Payload(), t.Headers()), opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil // resubmitted already by an earlier run of this task
	}
	return err
}

// originalOptions looks up the options of the running task that asynq does
// not pass to its handler, when an inspector is configured.
func (m *mw) originalOptions(meta taskMeta, log taskLog) []asynq.Option {
	if m.cfg.inspector == nil || meta.queue == "" {
		return nil
	}
	info, err := m.cfg.inspector.GetTaskInfo(meta.queue, meta.id)
	if err != nil {
		log.Warn("resubmitting without the task's timeout, deadline and retention: lookup failed", "err", err)
		return nil
	}
	var opts []asynq.Option
	if info.Timeout > 0 {
		opts = append(opts, asynq.Timeout(info.Timeout))
	}
	if !info.Deadline.IsZero() {
		opts = append(opts, asynq.Deadline(info.Deadline))
	}
	if info.Retention > 0 {
		opts = append(opts, asynq.Retention(info.Retention))
	}
	return opts
}

// nextID derives the ID of a resubmitted task: "id~r1", then "id~r2"...
func nextID(id string) string {
	base, n := id, 0
	if i := strings.LastIndex(id, resubmitMark); i >= 0 {
		if k, err := strconv.Atoi(id[i+len(resubmitMark):]); err == nil {
			base, n = id[:i], k
		}
	}
	return base + resubmitMark + strconv.Itoa(n+1)
}
