package middleware

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/statelog"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// The archive sweep moves back a task parked on its last retry whose
// parker stopped first (docs/guide/MIDDLEWARE.md, "Hot resources and last
// retries"); a claim lets one process alone move it (RunTask would also
// move it once it completed).
var (
	sweepEvery = time.Minute
	sweepAfter = reviveFor + reviveStep // past the parker's own tries
	sweepIdle  = time.Hour              // a queue's sweep stops after this long without a task of it
	sweepPages = 10                     // pages of 100, newest first
)

// parkedText is what a parked task's last error holds after errConflict's
// text (or the outage's): the park's nonce follows (conflictError.Error).
const parkedText = "task requeued (parked "

// sweepKey names a sweep: one per broker client and queue in a process.
type sweepKey struct {
	broker redis.UniversalClient
	queue  string
}

// sweeps holds the running sweeps (*sweep).
var sweeps sync.Map

// sweep is one queue's: a timer between passes, no goroutine.
type sweep struct {
	key       sweepKey
	inspector *asynq.Inspector
	log       *slog.Logger
	seen      atomic.Bool // a task of the queue ran since the last pass
	idle      time.Duration
	st        statelog.State
	// sweepEvery, sweepAfter and sweepIdle as the sweep started (a test's
	// change reaches no sweep that started before).
	every, after, idleMax time.Duration
}

// sweepSeen notes a task of queue; the first one (since the queue's sweep
// last stopped) starts its sweep, with a pass at once.
func (m *mw) sweepSeen(queue string) {
	if m.cfg.broker == nil || queue == "" {
		return
	}
	k := sweepKey{m.cfg.broker, queue}
	if s, ok := sweeps.Load(k); ok {
		if s := s.(*sweep); !s.seen.Load() {
			s.seen.Store(true)
		}
		return
	}
	s := &sweep{key: k, inspector: asynq.NewInspectorFromRedisClient(m.cfg.broker), log: m.cfg.logger,
		every: sweepEvery, after: sweepAfter, idleMax: sweepIdle}
	if _, loaded := sweeps.LoadOrStore(k, s); !loaded {
		time.AfterFunc(0, s.pass)
	}
}

// pass moves back the stale parked tasks of the queue's newest archived
// tasks, then waits for the next pass, or stops: the broker client was
// closed, or no task of the queue ran for sweepIdle.
func (s *sweep) pass() {
	n, err := s.queue(context.Background())
	if n > 0 {
		s.log.Warn("moved back to their queue tasks left parked in the archive (their process stopped)", "queue", s.key.queue, "tasks", n)
	}
	closed := err != nil && (errors.Is(err, redis.ErrClosed) || strings.Contains(err.Error(), redis.ErrClosed.Error()))
	switch {
	case closed:
	case err != nil:
		s.st.Fail(s.log, slog.LevelWarn, "cannot look for parked tasks left in the archive", err, "queue", s.key.queue)
	default:
		s.st.OK(s.log, "looking for parked tasks left in the archive again", "queue", s.key.queue)
	}
	if s.idle += s.every; s.seen.Swap(false) {
		s.idle = 0
	}
	if closed || s.idle >= s.idleMax {
		sweeps.Delete(s.key)
		return
	}
	time.AfterFunc(s.every, s.pass)
}

// queue moves back the stale parked tasks among the newest archived tasks
// of the queue; it returns how many it moved.
func (s *sweep) queue(ctx context.Context) (int, error) {
	qi, err := s.inspector.GetQueueInfo(s.key.queue)
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	moved, last := 0, (qi.Archived+99)/100
	for page := last; page >= 1 && page > last-sweepPages; page-- {
		tasks, err := s.inspector.ListArchivedTasks(s.key.queue, asynq.Page(page), asynq.PageSize(100))
		if err != nil {
			return moved, err
		}
		for _, t := range tasks {
			if !s.stale(t) {
				continue
			}
			if ok, err := s.revive(ctx, t.ID); err != nil {
				return moved, err
			} else if ok {
				moved++
			}
		}
	}
	return moved, nil
}

// stale tells a task parked longer ago than its parker keeps trying.
func (s *sweep) stale(t *asynq.TaskInfo) bool {
	return strings.HasPrefix(t.LastErr, "middleware: ") && strings.Contains(t.LastErr, parkedText) &&
		time.Since(t.LastFailedAt) > s.after
}

// revive claims the task, looks at it again and moves it back.
func (s *sweep) revive(ctx context.Context, id string) (bool, error) {
	claim := queuePrefix(s.key.queue) + "asynqlock:revive:" + id
	won, err := s.key.broker.SetNX(ctx, claim, "1", 10*time.Minute).Result()
	if err != nil || !won {
		return false, err
	}
	t, err := s.inspector.GetTaskInfo(s.key.queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) {
		return false, nil
	}
	if err != nil || t.State != asynq.TaskStateArchived || !s.stale(t) {
		return false, err
	}
	return true, s.inspector.RunTask(s.key.queue, id)
}
