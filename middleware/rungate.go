package middleware

import (
	"context"
	"slices"
	"sync"

	"github.com/hibiken/asynq"
)

// runGate is a Room's run places: a task takes its place when it starts,
// gives it back while it waits for a busy lock, takes one again once it
// holds the lock (ahead of tasks that hold none), and gives it back when its
// handler returns.
type runGate struct {
	mu    sync.Mutex
	size  int
	taken int
	// Tasks waiting for a place, oldest first: holders hold their locks
	// and are let in first; others are tasks that have not tried yet.
	holders, others []chan struct{}
}

// newRunGate returns a gate of n places (n >= 1).
func newRunGate(n int) *runGate {
	return &runGate{size: max(n, 1)}
}

// enter takes a place, waiting while the gate is full, until ctx ends; a
// holder is let in ahead of the others.
func (g *runGate) enter(ctx context.Context, holder bool) error {
	g.mu.Lock()
	if g.taken < g.size { // then nobody waits: leave hands places on
		g.taken++
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if holder {
		g.holders = append(g.holders, ch)
	} else {
		g.others = append(g.others, ch)
	}
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	granted := !g.unqueue(ch)
	g.mu.Unlock()
	if granted { // as ctx ended: pass it on
		g.leave()
	}
	return context.Cause(ctx)
}

// unqueue removes ch from the waiters; false if it was let in already.
func (g *runGate) unqueue(ch chan struct{}) bool {
	for _, q := range []*[]chan struct{}{&g.holders, &g.others} {
		if i := slices.Index(*q, ch); i >= 0 {
			*q = slices.Delete(*q, i, i+1)
			return true
		}
	}
	return false
}

// leave gives a place back, to the first waiter if there is one.
func (g *runGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range []*[]chan struct{}{&g.holders, &g.others} {
		if len(*q) > 0 {
			close((*q)[0])
			*q = (*q)[1:]
			return
		}
	}
	g.taken--
}

// place is one task's place in a gate along its run; it belongs to the
// task's goroutine. A nil place does nothing.
type place struct {
	g    *runGate
	held bool
}

// place returns a task's place in g, not yet taken; nil for a nil gate.
func (g *runGate) place() *place {
	if g == nil {
		return nil
	}
	return &place{g: g}
}

// take takes the place if it is not held; holder says the task holds its
// lock.
func (p *place) take(ctx context.Context, holder bool) error {
	if p == nil || p.held {
		return nil
	}
	if err := p.g.enter(ctx, holder); err != nil {
		return err
	}
	p.held = true
	return nil
}

// drop gives the place back if it is held.
func (p *place) drop() {
	if p != nil && p.held {
		p.held = false
		p.g.leave()
	}
}

// around returns h, giving the place back as soon as h returns (before the
// lock's release round).
func (p *place) around(h asynq.Handler) asynq.Handler {
	if p == nil {
		return h
	}
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		defer p.drop()
		return h.ProcessTask(ctx, t)
	})
}

type placeKey struct{}

// withPlace returns ctx carrying p, so that a wait deep in the conflict
// paths gives the place back (dropPlace).
func withPlace(ctx context.Context, p *place) context.Context {
	if p == nil {
		return ctx
	}
	return context.WithValue(ctx, placeKey{}, p)
}

// dropPlace gives back the place of the task whose context ctx is, before
// it waits for its lock.
func dropPlace(ctx context.Context) {
	if p, ok := ctx.Value(placeKey{}).(*place); ok {
		p.drop()
	}
}
