package middleware

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/hibiken/asynq"
)

// resubmitMark separates a task ID from its resubmission count.
const resubmitMark = "~r"

// errInspectTimeout is an inspector call that did not answer in time.
var errInspectTimeout = errors.New("no answer from the broker within the resubmission timeout")

// resubmit enqueues a copy of the task under a derived ID (so that a crash
// between resubmitting and revoking cannot make two copies), in the same
// queue with the same retry budget (and, with an inspector, the same
// timeout, deadline and retention), after a conflict delay. A failed enqueue
// is tried once more: the derived ID makes a repeat safe, and a copy stored
// by the first try despite its error then shows as a conflict on the ID.
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
	var err error
	for range 2 {
		ectx, cancel := lockutil.Detached(ctx)
		_, err = m.cfg.enqueuer.EnqueueContext(ectx, asynq.NewTaskWithHeaders(t.Type(), t.Payload(), t.Headers()), opts...)
		cancel()
		if err == nil || errors.Is(err, asynq.ErrTaskIDConflict) {
			return nil // stored now, or by an earlier try or run of this task
		}
	}
	return err
}

// originalOptions looks up the options of the running task that asynq does
// not pass to its handler, when an inspector is configured.
func (m *mw) originalOptions(meta taskMeta, log taskLog) []asynq.Option {
	if m.cfg.inspector == nil || meta.queue == "" {
		return nil
	}
	info, err := inspect(func() (*asynq.TaskInfo, error) { return m.cfg.inspector.GetTaskInfo(meta.queue, meta.id) })
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

// copyAbsent reports whether the broker says the resubmitted copy does not
// exist; false when it cannot tell (no inspector, no answer).
func (m *mw) copyAbsent(meta taskMeta) bool {
	if m.cfg.inspector == nil || meta.queue == "" {
		return false
	}
	_, err := inspect(func() (*asynq.TaskInfo, error) { return m.cfg.inspector.GetTaskInfo(meta.queue, nextID(meta.id)) })
	return errors.Is(err, asynq.ErrTaskNotFound)
}

// dropLateCopy runs after a failed resubmission, once the task got its lock,
// just before it runs: a copy whose enqueue was still on its way when
// copyAbsent looked would run the task a second time, so it is deleted.
// copyRuns reports a copy that exists and cannot be deleted (it is running):
// the copy does the work. err means the broker could not tell.
func (m *mw) dropLateCopy(meta taskMeta, log taskLog) (copyRuns bool, err error) {
	id := nextID(meta.id)
	_, derr := inspect(func() (struct{}, error) { return struct{}{}, m.cfg.inspector.DeleteTask(meta.queue, id) })
	switch {
	case derr == nil:
		log.Warn("deleted a resubmitted copy that was stored late; this run does the work", "copy_id", id)
		return false, nil
	case errors.Is(derr, asynq.ErrTaskNotFound):
		return false, nil
	}
	if _, gerr := inspect(func() (*asynq.TaskInfo, error) { return m.cfg.inspector.GetTaskInfo(meta.queue, id) }); gerr == nil {
		return true, nil
	} else if !errors.Is(gerr, asynq.ErrTaskNotFound) {
		return false, errors.Join(derr, gerr)
	}
	return false, nil // gone meanwhile: it completed or was deleted
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
