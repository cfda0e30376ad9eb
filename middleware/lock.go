package middleware

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/trace"
)

// mw is one configured middleware.
type mw struct {
	client *redlock.Client
	key    KeyFunc
	cfg    config

	mu         sync.Mutex
	res        map[string]*resState // per resource, while in use or contended lately (state.go)
	idle       []idleRec            // idle entries kept a while, oldest first (from idleHead)
	idleHead   int
	holds      *holdTable // recent hold times of resources whose state was dropped (pace.go)
	keeper     *keeper    // starts the keep-alives of long runs (keeper.go)
	tracer     trace.Tracer
	promoteErr failState // promotions (and revivals) failing (failstate.go)
	parkErr    failState // park calls failing
	releaseErr failState // releases failing (releaseState)
	outage     time.Time // a wait ended for want of a quorum; until then arrivals try first
}

// New returns the middleware, or an error naming a bad argument.
func New(client *redlock.Client, key KeyFunc, opts ...Option) (asynq.MiddlewareFunc, error) {
	if client == nil {
		return nil, errors.New("middleware: nil redlock client")
	}
	if key == nil {
		return nil, errors.New("middleware: nil KeyFunc")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("middleware: nil option")
		}
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := newMW(client, key, cfg)
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return m.process(ctx, t, next)
		})
	}, nil
}

func newMW(client *redlock.Client, key KeyFunc, cfg config) *mw {
	if cfg.limit > 1 {
		cfg.lockOpts = append(slices.Clip(cfg.lockOpts), redlock.WithLimit(cfg.limit))
	}
	m := &mw{client: client, key: key, cfg: cfg, res: make(map[string]*resState), holds: &holdTable{seed: maphash.MakeSeed()},
		keeper: newKeeper(keepAfterOf(cfg.ttl)), tracer: cfg.tracer()}
	m.settleStates()
	return m
}

// Lock returns the middleware: use it with mux.Use or around one handler.
// It panics on a bad argument (a nil client or KeyFunc, an invalid option),
// like regexp.MustCompile; use New to get the error instead.
func Lock(client *redlock.Client, key KeyFunc, opts ...Option) asynq.MiddlewareFunc {
	f, err := New(client, key, opts...)
	if err != nil {
		panic(err)
	}
	return f
}

// resource names the lock of a task with key.
func (m *mw) resource(t *asynq.Task, key string) string {
	if m.cfg.shared {
		return resourcePrefix + key
	}
	return resourcePrefix + t.Type() + ":" + key
}

// process runs one task: key, lock (or the conflict policy), handler.
func (m *mw) process(ctx context.Context, t *asynq.Task, next asynq.Handler) error {
	meta := metaOf(ctx)
	meta.prior = priorRuns(t)
	if by, ok := t.Headers()[markerHeader]; ok {
		// A marker (of an earlier version) only held an ID against a late
		// copy: the task it stood for is run by its original.
		m.cfg.logger.Debug("a marker ran: nothing to do", "task_id", meta.id, "task_type", t.Type(), "claimed_by", by)
		return nil
	}
	key, err := m.key(ctx, t)
	if err != nil {
		return m.badKey(t, meta, err)
	}
	p := m.cfg.runGate.place() // nil without a gate: no allocation
	if err := p.take(ctx, false); err != nil {
		return fmt.Errorf("task %s (id %s): waiting to run: %w", t.Type(), meta.id, err)
	}
	defer p.drop()
	if key == "" {
		return next.ProcessTask(ctx, t)
	}
	r := m.newRun(t, next, meta, m.resource(t, key))
	// A wait gives the place back (dropPlace); the handler's context does
	// not carry it, so no lock taken inside the handler can.
	wctx := withPlace(ctx, p)
	lock, waited, err := m.acquire(wctx, r.res, r.opts)
	if err != nil {
		if ferr := r.acquireFailed(ctx, err); ferr != nil {
			return ferr
		}
		if lock, err = r.conflict(wctx, err); lock == nil {
			return err
		}
		waited = true
	}
	r.lock = lock
	if r.completed(lock) {
		return r.skipCompleted(ctx)
	}
	if m.cfg.observer != nil {
		ev := r.lockEvent(EventAcquired, "", nil)
		if waited {
			ev.Handover = m.handoverKind(r.res, time.Now())
		}
		r.observeWait(ev)
	}
	r.held = m.countHolder(r.res) // until the release is answered
	if err := p.take(ctx, true); err != nil {
		r.release(ctx, nil)
		return fmt.Errorf("%s: holding %s, waiting to run: %w", r.name(), r.res, err)
	}
	r.next = p.around(r.next)
	m.promoteOnStart(meta.queue, r.res, meta.id)
	return r.run(ctx)
}
