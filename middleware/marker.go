package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/hibiken/asynq"
)

// markerHeader marks a task as a marker: a no-op task of the original's
// type under a copy's ID, which holds that ID against a copy stored late
// (see claimCopyID). Its value is the ID of the task that claimed it.
const markerHeader = "asynqlock-claimed-by"

// claimTries bounds the marker enqueues of one claim: a failed try is tried
// again (as resubmit does), and so is an ID found free after a conflict.
const claimTries = 3

// claimCopyID runs after a failed resubmission under id, whose copy may
// still be on its way to the broker and land at any time: it enqueues a
// marker under id, so that asynq, which stores one task per ID and checks
// that in the same script as it stores, refuses any copy that arrives
// later. A copy stored before it makes the marker's enqueue conflict.
// stored reports a copy under id (it carries the task: this run must not
// do the work); false with a nil error means the marker holds id, no copy
// exists or ever will, and this run may do the work itself. err means the
// broker could not tell.
func (r *taskRun) claimCopyID(ctx context.Context, id string) (stored bool, err error) {
	for range claimTries {
		err = r.enqueueMarker(ctx, id)
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, asynq.ErrTaskIDConflict) {
			continue // may be stored all the same: a conflict on the next try tells
		}
		if r.m.cfg.inspector == nil {
			return false, err // cannot tell this run's marker from a copy
		}
		info, lerr := r.lookupCopy(id)
		switch {
		case lerr == nil:
			return !isMarker(info), nil
		case !errors.Is(lerr, asynq.ErrTaskNotFound):
			return false, errors.Join(err, lerr)
		}
		// Gone meanwhile (deleted): claim it again.
	}
	return false, err
}

// enqueueMarker enqueues the task's marker under id, in its queue, kept
// as completed for markerRetention. It has no payload: it never reaches a
// handler (process returns at its header), and a server of an earlier
// version, which would hand it to the handler as a task of the type, hands
// it nothing to apply.
func (r *taskRun) enqueueMarker(ctx context.Context, id string) error {
	opts := []asynq.Option{asynq.TaskID(id), asynq.Retention(markerRetention(ctx))}
	if r.meta.queue != "" {
		opts = append(opts, asynq.Queue(r.meta.queue))
	}
	ectx, cancel := lockutil.Detached(ctx)
	defer cancel()
	marker := asynq.NewTaskWithHeaders(r.t.Type(), nil, map[string]string{markerHeader: r.meta.id})
	_, err := r.m.cfg.enqueuer.EnqueueContext(ectx, marker, opts...)
	return err
}

// markerRetention is how long a marker holds its ID once it completed: as
// long as a copy would be kept (copyRetention), and never less than a copy
// of a task without a deadline. The copies it stands against were sent
// before it, so each may land that long after it was sent and be refused;
// one small entry per failed resubmission is cheap against that margin.
func markerRetention(ctx context.Context) time.Duration {
	return max(copyRetention(ctx), copyKeepDefault+copyKeepMargin)
}

// isMarker reports whether a task the broker holds is a marker.
func isMarker(info *asynq.TaskInfo) bool {
	_, ok := info.Headers[markerHeader]
	return ok
}
