package middleware

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/statelog"
	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/trace"
)

// mw is one configured middleware.
type mw struct {
	client *redlock.Client
	key    KeyFunc
	cfg    config
	// keepAfter is how long a handler runs before its keep-alive starts.
	keepAfter time.Duration

	mu         sync.Mutex
	res        map[string]*resState // per resource, while in use or contended lately (state.go)
	idle       []idleRec            // idle entries kept a while, oldest first (from idleHead)
	idleHead   int
	holds      *holdTable // recent hold times of resources whose state was dropped (the pace, conflict.go)
	tracer     trace.Tracer
	promoteErr statelog.State // promotions (and revivals) failing (brokerState, state.go)
	parkErr    statelog.State // park calls failing
	releaseErr statelog.State // releases failing (releaseState)
	outage     time.Time      // a wait ended for want of a quorum; until then arrivals try first
	atOnce     *waitCap       // sizes the default wait places (WithBroker without WithRoom); nil: none
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
		keepAfter: keepAfterOf(cfg.ttl), tracer: cfg.tracer()}
	if cfg.room == nil { // the default room: a share of two per resource
		m.cfg.room = &room{maxWaiters: defaultMaxWaiters}
		if cfg.broker != nil {
			m.cfg.room.wait = newWaitCap(1)
			m.atOnce = m.cfg.room.wait
		}
	}
	for _, st := range []*statelog.State{&m.promoteErr, &m.parkErr, &m.releaseErr} {
		st.Settle = recoverySettle
	}
	return m
}

func (m *mw) observe(e Event) {
	if m.cfg.observer != nil {
		m.cfg.observer(e)
	}
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

// process runs one task: key, lock (or the conflict policy), handler.
func (m *mw) process(ctx context.Context, t *asynq.Task, next asynq.Handler) error {
	if m.atOnce != nil {
		m.atOnce.arrive()
		defer m.atOnce.now.Add(-1)
	}
	meta := metaOf(ctx)
	m.sweepSeen(meta.queue) // the archive sweep of the task's queue (sweep.go)
	if by, ok := t.Headers()[markerHeader]; ok {
		// An earlier version's marker: the task it stood for runs as its original.
		m.cfg.logger.Debug("a marker ran: nothing to do", "task_id", meta.id, "task_type", t.Type(), "claimed_by", by)
		return nil
	}
	key, err := m.key(ctx, t)
	if err != nil {
		return m.badKey(t, meta, err)
	}
	p := m.cfg.room.run.place() // nil without a gate: no allocation
	if err := p.take(ctx, false); err != nil {
		return fmt.Errorf("task %s (id %s): waiting to run: %w", t.Type(), meta.id, err)
	}
	defer p.drop()
	if key == "" {
		return next.ProcessTask(ctx, t)
	}
	r := m.newRun(t, next, meta, key)
	r.place = p // a wait gives it back
	lock, waited, err := r.acquire(ctx)
	if err != nil {
		if ferr := r.acquireFailed(ctx, err); ferr != nil {
			return ferr
		}
		if lock, err = r.conflict(ctx, err); lock == nil {
			return err
		}
		waited = true
	}
	r.lock = lock
	var released time.Time
	r.held, released = m.countHolder(r.res, meta.queue, meta.id) // its start, until the release is answered
	defer r.releaseOnPanic(ctx)
	if r.skipCompleted(ctx) {
		return nil
	}
	r.observeAcquired(waited, released)
	if err := p.take(ctx, true); err != nil {
		r.release(ctx)
		return fmt.Errorf("%s: holding %s, waiting to run: %w", r.name(), r.res, err)
	}
	return r.run(ctx)
}

// releaseOnPanic releases the lock, and ends the resource's start, of a
// task that panicked on its way to the handler (in the application's
// observer), then panics on; once the handler ran, run cleans up itself.
func (r *taskRun) releaseOnPanic(ctx context.Context) {
	if !r.ran.IsZero() {
		return
	}
	if p := recover(); p != nil {
		r.release(ctx)
		panic(p)
	}
}

// badKey archives a task whose key cannot be derived, saying why.
func (m *mw) badKey(t *asynq.Task, meta taskMeta, err error) error {
	if !errors.Is(err, errBadKey) {
		err = fmt.Errorf("%w: %w", errBadKey, err)
	}
	m.cfg.logger.Warn("task archived: bad lock key", "task_id", meta.id, "task_type", t.Type(), "err", err)
	m.observe(Event{Kind: kindBadKey, TaskType: t.Type(), TaskID: meta.id, Err: err})
	return fmt.Errorf("task %s (id %s): %w: %w", t.Type(), meta.id, err, asynq.SkipRetry)
}

// taskRun is one keyed task's way from its key to its release, the steps its
// methods; it belongs to the task's goroutine (what tasks share is in mw).
type taskRun struct {
	m     *mw
	t     *asynq.Task
	next  asynq.Handler
	meta  taskMeta
	res   string    // the task's lock resource
	start time.Time // when it began to ask for its lock
	log   taskLog
	lock  *redlock.Lock        // held from acquisition to release; a rollback may take it anew
	held  *resState            // the resource's entry while countHolder counts this task
	ran   time.Time            // when its handler started (zero: it did not run)
	place *place               // its run place, given back as soon as its handler returns
	opts  []redlock.LockOption // its acquisitions' options (lockOptsFor)
}

// newRun starts the run of task t on the resource of key: a value the
// caller keeps on its stack, so a run allocates nothing of its own.
func (m *mw) newRun(t *asynq.Task, next asynq.Handler, meta taskMeta, key string) taskRun {
	var res string
	if m.cfg.shared {
		res = resourcePrefix + key
	} else {
		res = resourcePrefix + t.Type() + ":" + key
	}
	return taskRun{m: m, t: t, next: next, meta: meta, res: res, start: time.Now(), opts: m.lockOptsFor(t, meta),
		log: taskLog{l: m.cfg.logger, id: meta.id, typ: t.Type(), res: res}}
}

// name is how errors name the task: "task TYPE (id ID)".
func (r *taskRun) name() string {
	return fmt.Sprintf("task %s (id %s)", r.t.Type(), r.meta.id)
}

// taskMeta is what asynq tells a handler about its task.
type taskMeta struct {
	id       string
	queue    string
	retried  int
	maxRetry int
	known    bool // run by an asynq server (the fields are set)
}

// budgetSpent reports whether asynq would archive this run on any error.
func (m taskMeta) budgetSpent() bool { return m.known && m.retried >= m.maxRetry }

// metaOf reads the task's metadata from its context. Tests replace it to run
// handlers outside an asynq server.
var metaOf = func(ctx context.Context) taskMeta {
	var m taskMeta
	m.id, m.known = asynq.GetTaskID(ctx)
	m.queue, _ = asynq.GetQueueName(ctx)
	m.retried, _ = asynq.GetRetryCount(ctx)
	m.maxRetry, _ = asynq.GetMaxRetry(ctx)
	return m
}

// taskLog logs with the task's ID, type and resource, built only for a line
// actually written.
type taskLog struct {
	l            *slog.Logger
	id, typ, res string
}

func (t taskLog) log(level slog.Level, msg string, args ...any) {
	if !t.l.Enabled(context.Background(), level) {
		return
	}
	t.l.Log(context.Background(), level, msg, append([]any{"task_id", t.id, "task_type", t.typ, "resource", t.res}, args...)...)
}

func (t taskLog) Debug(msg string, args ...any) { t.log(slog.LevelDebug, msg, args...) }
func (t taskLog) Warn(msg string, args ...any)  { t.log(slog.LevelWarn, msg, args...) }
func (t taskLog) Error(msg string, args ...any) { t.log(slog.LevelError, msg, args...) }
