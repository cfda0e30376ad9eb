package middleware

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"
)

// RunGate bounds the tasks of a process that run their handlers at once,
// across the middlewares that share it (WithRunGate) and the handlers it
// wraps (Wrap). A locked task takes its place once it holds its lock and
// gives it back when its handler returns: a task waiting for its lock holds
// none.
//
// Give asynq's server more workers than the gate has places, and the tasks
// waiting for a hot resource wait in the extra workers instead of taking
// those of tasks that could run: cold tasks keep the gate's places, and the
// hot resource keeps enough waiters in each process for its turns to pass
// within the process (docs/HOTKEYS.md). worker.New does so with
// WORKER_WAIT_ROOM. It is safe for concurrent use.
type RunGate struct {
	places chan struct{}
}

// NewRunGate returns a gate of n places (n >= 1).
func NewRunGate(n int) *RunGate {
	return &RunGate{places: make(chan struct{}, max(n, 1))}
}

// Wrap returns h run under the gate: for handlers that take no lock, which
// count against the same places as the locked ones.
func (g *RunGate) Wrap(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if err := g.enter(ctx); err != nil {
			return fmt.Errorf("task %s: waiting to run: %w", t.Type(), err)
		}
		defer g.leave()
		return h.ProcessTask(ctx, t)
	})
}

// enter takes a place, waiting while the gate is full, until ctx ends. A
// nil gate always lets in.
func (g *RunGate) enter(ctx context.Context) error {
	if g == nil {
		return nil
	}
	select {
	case g.places <- struct{}{}:
		return nil
	default:
	}
	select {
	case g.places <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// holding returns h run in the place its caller took, given back as soon
// as h returns (before the lock's release round), and done, which gives it
// back if h never ran; both run on the task's goroutine. A nil gate
// returns h as it is.
func (g *RunGate) holding(h asynq.Handler) (held asynq.Handler, done func()) {
	if g == nil {
		return h, func() {}
	}
	left := false
	done = func() {
		if !left {
			left = true
			g.leave()
		}
	}
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		defer done()
		return h.ProcessTask(ctx, t)
	}), done
}

// leave gives a place back.
func (g *RunGate) leave() {
	if g != nil {
		<-g.places
	}
}
