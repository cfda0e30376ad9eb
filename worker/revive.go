package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/statelog"
	"github.com/hibiken/asynq"
)

// A busy task on its last retry waits parked in asynq's archive, and its
// parker brings it back (docs/guide/OPERATIONS.md). If that process stops
// and no task of the resource runs while the park's record lives, nothing
// else would: every worker looks at the latest archived tasks of its
// queues and moves back one parked for longer than its parker keeps trying.
// One worker alone moves a task (a claim in the broker), because RunTask
// also moves a task that completed meanwhile.
var (
	reviveEvery = time.Minute
	reviveAfter = 16 * time.Minute // the parker tries for 15 (middleware)
	reviveScan  = 10               // pages of 100, newest first
)

// parkedText is what a parked task's last error holds after
// middleware.ErrConflict's text (or the outage's): the park's nonce follows.
const parkedText = "task requeued (parked "

// startRevive runs the sweep until ctx ends.
func (w *Worker) startRevive(ctx context.Context) <-chan struct{} {
	var st statelog.State
	return every(ctx, reviveEvery, func() {
		n, err := 0, error(nil)
		for q := range w.cfg.Queues {
			m, qerr := w.reviveQueue(ctx, q)
			n, err = n+m, errors.Join(err, qerr)
		}
		if n > 0 {
			w.log.Warn("moved back to their queues tasks left parked in the archive (their worker stopped)", "tasks", n)
		}
		if err != nil && ctx.Err() == nil {
			st.Fail(w.log, slog.LevelWarn, "cannot look for parked tasks left in the archive", err)
		} else if err == nil {
			st.OK(w.log, "looking for parked tasks left in the archive again")
		}
	})
}

// reviveQueue moves back the stale parked tasks among the newest archived
// tasks of queue; it returns how many it moved.
func (w *Worker) reviveQueue(ctx context.Context, queue string) (int, error) {
	qi, err := w.inspector.GetQueueInfo(queue)
	if errors.Is(err, asynq.ErrQueueNotFound) || (err == nil && qi.Archived == 0) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	moved, last := 0, (qi.Archived+99)/100
	for page := last; page >= 1 && page > last-reviveScan; page-- {
		tasks, err := w.inspector.ListArchivedTasks(queue, asynq.Page(page), asynq.PageSize(100))
		if err != nil {
			return moved, err
		}
		for _, t := range tasks {
			if staleParked(t) {
				ok, err := w.reviveTask(ctx, queue, t.ID)
				if err != nil {
					return moved, err
				}
				if ok {
					moved++
				}
			}
		}
	}
	return moved, nil
}

// staleParked tells a task parked longer ago than its parker keeps trying.
func staleParked(t *asynq.TaskInfo) bool {
	return strings.HasPrefix(t.LastErr, "middleware: ") && strings.Contains(t.LastErr, parkedText) &&
		time.Since(t.LastFailedAt) > reviveAfter
}

// reviveTask claims the task, looks at it again and moves it back.
func (w *Worker) reviveTask(ctx context.Context, queue, id string) (bool, error) {
	claim := parkQueuePrefix(queue) + "asynqlock:revive:" + id
	won, err := w.ping.SetNX(ctx, claim, "1", 10*time.Minute).Result()
	if err != nil || !won {
		return false, err
	}
	t, err := w.inspector.GetTaskInfo(queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) {
		return false, nil
	}
	if err != nil || t.State != asynq.TaskStateArchived || !staleParked(t) {
		return false, err
	}
	return true, w.inspector.RunTask(queue, id)
}
