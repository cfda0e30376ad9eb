package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// mw is one configured middleware.
type mw struct {
	client *redlock.Client
	key    KeyFunc
	cfg    config

	mu         sync.Mutex
	waiters    map[string]int        // tasks of this process waiting per resource
	promos     map[promoKey][]string // started task IDs to report, per resource being promoted
	promoReq   map[promoKey]bool     // a promotion was asked for since the last call
	holders    map[string]int        // tasks of this process holding each resource
	promoteErr bool                  // the last promotion failed
	parkErr    bool                  // the last park call failed
	pace       pacer
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
	m := &mw{client: client, key: key, cfg: cfg, waiters: make(map[string]int), promos: make(map[promoKey][]string), promoReq: make(map[promoKey]bool)}
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return m.process(ctx, t, next)
		})
	}, nil
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
		return m.cfg.prefix + key
	}
	return m.cfg.prefix + t.Type() + ":" + key
}

func (m *mw) process(ctx context.Context, t *asynq.Task, next asynq.Handler) error {
	meta := metaOf(ctx)
	key, err := m.key(ctx, t)
	if err != nil {
		return m.badKey(t, meta, err)
	}
	if key == "" {
		return next.ProcessTask(ctx, t)
	}
	res := m.resource(t, key)
	log := taskLog{l: m.cfg.logger, id: meta.id, typ: t.Type(), res: res}
	start := time.Now()
	lock, waited, err := m.acquire(ctx, res)
	if err != nil {
		if ctx.Err() != nil || !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrQuorum) {
			// asynq ended the run (deadline, shutdown), or the lock client
			// failed for another reason (closed, bad input): an ordinary
			// failure, retried and counted as such; never a conflict.
			return fmt.Errorf("task %s (id %s): acquiring %s: %w", t.Type(), meta.id, res, err)
		}
		lock, err = m.conflict(ctx, t, meta, res, err, start, log)
		if lock == nil {
			return err
		}
		waited = true
	}
	ev := Event{Kind: EventAcquired, TaskType: t.Type(), TaskID: meta.id, Resource: res, Policy: m.cfg.policy.String(), Wait: time.Since(start)}
	if waited {
		ev.Handover = m.handoverKind(res, time.Now())
	}
	m.observe(ev)
	defer m.countHolder(res)()
	m.promoteAhead(meta.queue, res, meta.id)
	return m.run(ctx, t, next, lock, meta, log)
}

func (m *mw) lockOpts() []redlock.LockOption {
	var o []redlock.LockOption
	if m.cfg.fencing {
		o = append(o, redlock.WithFencing())
	}
	if m.cfg.maxHold > 0 {
		o = append(o, redlock.WithMaxHold(m.cfg.maxHold))
	}
	return o
}

// acquire tries once (under the Wait policy, not when a task of this
// process holds res: see countHolder), then under the Wait policy waits (bounded, and only if
// fewer than maxWaiters tasks of this process already wait for res, or,
// without parking, if the wait should be short). waited reports a lock
// obtained by waiting.
func (m *mw) acquire(ctx context.Context, res string) (lock *redlock.Lock, waited bool, err error) {
	if m.cfg.policy.wait > 0 && m.heldHere(res) {
		err = errHeldHere
	} else if lock, err = m.client.TryAcquire(ctx, res, m.cfg.ttl, m.lockOpts()...); err == nil || m.cfg.policy.wait <= 0 || !errors.Is(err, redlock.ErrLocked) {
		return lock, false, err
	}
	if !m.enterWait(res, m.cfg.broker == nil) {
		return nil, false, err
	}
	lock, err = m.waitFor(ctx, res, m.cfg.policy.wait)
	return lock, err == nil, err
}

// waitFor waits up to bound for res; the caller entered the wait. When the
// bound ends, the wait goes on for another bound (up to waitRounds bounds)
// unless the resource is seen stuck: the same holder on the lock nodes at
// stuckAfter bound ends in a row after the first, with no release by a task
// of this process meanwhile, or the lock nodes failed (no quorum): requeueing a task that is being served in turn only sends it to
// the back, and with asynq's default RetryDelayFunc keeps it away 15s or more.
func (m *mw) waitFor(ctx context.Context, res string, bound time.Duration) (*redlock.Lock, error) {
	defer m.leaveWait(res)
	holder, same := "", 0
	for round := 1; ; round++ {
		since := time.Now()
		wctx, cancel := context.WithTimeout(ctx, bound)
		lock, err := m.client.Acquire(wctx, res, m.cfg.ttl, m.lockOpts()...)
		ended := wctx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil || !ended {
			return lock, err
		}
		noQuorum := errors.Is(err, redlock.ErrQuorum) && !errors.Is(err, redlock.ErrLocked)
		if round < waitRounds && !noQuorum {
			now, known := m.holderOf(ctx, res)
			if known && now != "" && now == holder && !m.pace.lastRelease(res).After(since) {
				same++
			} else {
				same = 0
			}
			holder = now
			if same < m.stuckAfter() {
				continue
			}
		}
		// Our wait bound ended, not the task: report the lock's cause
		// alone, not a deadline that asynq could take for the task's.
		cause := redlock.ErrLocked
		if noQuorum {
			cause = redlock.ErrQuorum
		}
		return nil, fmt.Errorf("%w (after waiting %v)", cause, time.Duration(round)*bound)
	}
}

// holderOf returns the token most lock nodes report for res ("" when
// none); known is false when the nodes could not tell.
func (m *mw) holderOf(ctx context.Context, res string) (token string, known bool) {
	ictx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	states, err := m.client.Inspect(ictx, res)
	if err != nil {
		return "", false
	}
	count := map[string]int{}
	best := ""
	for _, st := range states {
		if st.Err == nil && st.Token != "" {
			if count[st.Token]++; count[st.Token] > count[best] {
				best = st.Token
			}
		}
	}
	return best, true
}

// waitRounds bounds how many times a wait is renewed while its resource
// makes progress.
const waitRounds = 15

// stuckAfter is how many bounds in a row one holder must keep the resource
// (with no release in this process) for a waiter to give up: 1 with parking;
// 4 without, where a requeue may cost asynq's default backoff (15s and
// more) and a failure count if the server lacks IsFailure and RetryDelay.
func (m *mw) stuckAfter() int {
	if m.cfg.broker != nil {
		return 1
	}
	return 4
}

// requeueTrip is how long a requeued task is away at least with asynq's
// default DelayedTaskCheckInterval: waiting any shorter is better.
const requeueTrip = 5 * time.Second

// enterWait counts a waiter of res if there is room: fewer than maxWaiters
// wait, or (soft) the tasks ahead should be done within the Wait bound and
// sooner than a requeued task could come back.
func (m *mw) enterWait(res string, soft bool) bool {
	m.mu.Lock()
	n := m.waiters[res]
	m.mu.Unlock()
	if n >= m.cfg.maxWaiters {
		if !soft || m.cfg.maxWaiters == 0 {
			return false
		}
		if ahead := time.Duration(n+1) * m.pace.typical(res); ahead >= min(requeueTrip, m.cfg.policy.wait) {
			return false
		}
	}
	m.forceWait(res)
	return true
}

// forceWait counts a waiter of res whatever the bound.
func (m *mw) forceWait(res string) {
	m.mu.Lock()
	m.waiters[res]++
	m.mu.Unlock()
}

func (m *mw) leaveWait(res string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waiters[res]--; m.waiters[res] <= 0 {
		delete(m.waiters, res)
	}
}

// badKey archives a task whose key cannot be derived, saying why.
func (m *mw) badKey(t *asynq.Task, meta taskMeta, err error) error {
	if !errors.Is(err, ErrBadKey) {
		err = fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	m.cfg.logger.Warn("task archived: bad lock key", "task_id", meta.id, "task_type", t.Type(), "err", err)
	m.observe(Event{Kind: EventBadKey, TaskType: t.Type(), TaskID: meta.id, Err: err})
	return fmt.Errorf("task %s (id %s): %w: %w", t.Type(), meta.id, err, asynq.SkipRetry)
}

// run executes the handler under the lock and cleans up after it.
func (m *mw) run(ctx context.Context, t *asynq.Task, next asynq.Handler, lock *redlock.Lock, meta taskMeta, log taskLog) (err error) {
	acquired := time.Now()
	res := lock.Resource()
	hold := m.hold(ctx, lock)
	hctx, cancel := context.WithCancelCause(ctx)
	stopLoss := context.AfterFunc(hold.ctx, func() {
		if cause := context.Cause(hold.ctx); errors.Is(cause, redlock.ErrLockLost) {
			cancel(cause)
		}
	})
	hctx = context.WithValue(hctx, infoKey{}, LockInfo{Resource: lock.Resource(), Token: lock.Token(), Fence: lock.Fence(), Until: lock.Until()})
	if hold.progress != nil {
		hctx = context.WithValue(hctx, progressKey{}, hold.progress)
	}
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked: roll back under the lock, release it, then
		// let asynq see the panic (it turns it into a failed run).
		p := recover()
		stopLoss()
		hold.stop()
		cancel(nil)
		if m.cfg.rollback != nil {
			var rerr error
			lost := errors.Is(context.Cause(hold.ctx), redlock.ErrLockLost)
			lock, rerr = m.rollback(ctx, t, meta, lock, lost, fmt.Errorf("handler panicked: %v", p), log)
			_ = rerr // logged and observed by rollback
		}
		if lock != nil {
			m.release(ctx, lock, log)
		}
		panic(p)
	}()
	herr := next.ProcessTask(hctx, t)
	finished = true
	lost := context.Cause(hold.ctx)
	if !errors.Is(lost, redlock.ErrLockLost) {
		lost = nil
	}
	stopLoss()
	hold.stop()
	cancel(nil)

	if lost != nil {
		log.Warn("lock lost while the task ran", "cause", lost)
		m.observe(Event{Kind: EventLost, TaskType: t.Type(), TaskID: meta.id, Resource: lock.Resource(), Err: lost})
	}
	if m.cfg.rollback != nil && (herr != nil || lost != nil) {
		cause := herr
		if cause == nil {
			cause = lost
		}
		var rerr error
		lock, rerr = m.rollback(ctx, t, meta, lock, lost != nil, cause, log)
		herr = errors.Join(herr, rerr)
	}
	if lock != nil {
		m.release(ctx, lock, log)
	}
	now := time.Now()
	m.pace.held(res, now.Sub(acquired))
	m.pace.releasedAt(res, now)
	m.promoteAhead(meta.queue, res, "")
	if lost != nil && !errors.Is(herr, redlock.ErrLockLost) {
		// The work was not protected to its end: retry it.
		herr = errors.Join(herr, fmt.Errorf("task %s (id %s): %w", t.Type(), meta.id, lost))
	}
	return herr
}

// taskLog logs with the task's ID, type and resource; it builds the
// attributes only when a line is actually written (not once per task).
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
func (t taskLog) Info(msg string, args ...any)  { t.log(slog.LevelInfo, msg, args...) }
func (t taskLog) Warn(msg string, args ...any)  { t.log(slog.LevelWarn, msg, args...) }
func (t taskLog) Error(msg string, args ...any) { t.log(slog.LevelError, msg, args...) }

// release gives the lock up with a context of its own: the task's may be
// cancelled already (deadline, shutdown).
func (m *mw) release(ctx context.Context, lock *redlock.Lock, log taskLog) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	switch err := lock.Release(rctx); {
	case errors.Is(err, redlock.ErrLockLost):
		log.Warn("lock found lost at release: exclusivity was not guaranteed to the end", "err", err)
	case err != nil:
		log.Warn("lock release failed; it expires at its TTL", "err", err)
	}
}
