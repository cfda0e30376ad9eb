package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Defaults used when no option overrides them.
const (
	DefaultTTL             = 30 * time.Second
	DefaultPrefix          = "task:"
	DefaultWait            = 2 * time.Second
	DefaultRollbackTimeout = 30 * time.Second
	releaseTimeout         = 5 * time.Second
)

// Policy decides what happens to a task whose resource is held by another.
type Policy struct {
	action action
	wait   time.Duration
}

type action int

const (
	actRequeue action = iota + 1
	actSkip
	actFail
)

// Wait blocks up to max for the lock (woken as soon as the holder releases,
// and never past the task's own deadline), then requeues the task — unless
// the resource changed hands meanwhile (a queue of waiters is being served):
// then the wait is renewed, up to 15 times max; a holder that stays put
// gets the waiter requeued after 2×max (with WithParking; 5×max without).
func Wait(max time.Duration) Policy { return Policy{action: actRequeue, wait: max} }

// Requeue returns the task to asynq at once, to be retried after a short
// jittered delay without consuming its retry budget (see IsFailure and
// RetryDelay).
func Requeue() Policy { return Policy{action: actRequeue} }

// Skip completes the task without running it (logged and observed).
func Skip() Policy { return Policy{action: actSkip} }

// Fail archives the task with asynq.SkipRetry.
func Fail() Policy { return Policy{action: actFail} }

// String names the policy, for logs and metric labels.
func (p Policy) String() string {
	switch p.action {
	case actRequeue:
		if p.wait > 0 {
			return "wait"
		}
		return "requeue"
	case actSkip:
		return "skip"
	case actFail:
		return "fail"
	}
	return "invalid"
}

// RollbackFunc undoes a task's partial work after its handler failed or its
// lock was lost. It runs while the lock is held; cause is the handler's error
// or the loss.
type RollbackFunc func(ctx context.Context, t *asynq.Task, cause error) error

// Enqueuer submits tasks; *asynq.Client satisfies it.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// TaskInspector looks tasks up and deletes them; *asynq.Inspector satisfies
// it. The middleware uses it to resubmit a task with the options asynq does
// not pass to handlers (timeout, deadline, retention), and to make sure a
// task whose resubmission failed does not run twice.
type TaskInspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

type config struct {
	ttl             time.Duration
	prefix          string
	shared          bool
	policy          Policy
	maxWaiters      int
	fencing         bool
	maxHold         time.Duration
	progress        time.Duration
	rollback        RollbackFunc
	rollbackTimeout time.Duration
	enqueuer        Enqueuer
	inspector       TaskInspector
	logger          *slog.Logger
	observer        func(Event)
	broker          redis.UniversalClient
	backstop        time.Duration
}

func defaultConfig() config {
	return config{
		ttl:             DefaultTTL,
		prefix:          DefaultPrefix,
		policy:          Wait(DefaultWait),
		maxWaiters:      2,
		rollbackTimeout: DefaultRollbackTimeout,
		logger:          slog.New(slog.DiscardHandler),
	}
}

func (c *config) validate() error {
	switch {
	case c.ttl <= 0:
		return fmt.Errorf("middleware: lock TTL must be positive, got %v", c.ttl)
	case c.policy.action == 0:
		return fmt.Errorf("middleware: conflict policy is not set (use Wait, Requeue, Skip or Fail)")
	case c.policy.wait < 0:
		return fmt.Errorf("middleware: wait bound must not be negative, got %v", c.policy.wait)
	case c.maxWaiters < 0:
		return fmt.Errorf("middleware: max waiters must not be negative, got %d", c.maxWaiters)
	case c.maxHold < 0:
		return fmt.Errorf("middleware: max hold must not be negative, got %v", c.maxHold)
	case c.progress < 0:
		return fmt.Errorf("middleware: progress stall bound must not be negative, got %v", c.progress)
	case c.rollbackTimeout <= 0:
		return fmt.Errorf("middleware: rollback timeout must be positive, got %v", c.rollbackTimeout)
	case c.backstop < 0:
		return fmt.Errorf("middleware: park backstop must not be negative, got %v", c.backstop)
	case c.logger == nil:
		return fmt.Errorf("middleware: logger is nil")
	}
	return nil
}

// Option configures the middleware.
type Option func(*config)

// WithTTL sets the lock's TTL (default 30s). The lock is extended about every
// TTL/3 while the handler runs, so the TTL bounds how long a crashed worker
// keeps the resource.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithPrefix sets the prefix of lock resource names (default "task:").
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithSharedKeys drops the task type from resource names, so that tasks of
// different types with the same key exclude each other.
func WithSharedKeys() Option { return func(c *config) { c.shared = true } }

// WithPolicy sets what happens on conflict (default Wait(2s)).
func WithPolicy(p Policy) Option { return func(c *config) { c.policy = p } }

// WithMaxWaiters bounds how many tasks of this process wait at once for one
// resource under the Wait policy (default 2), so a hot resource never ties up
// every worker: others are parked (see WithParking) or requeued. Without
// WithParking the bound is soft: a task still waits when the tasks ahead of
// it should be done (from measured hold times) sooner than a requeued task
// could come back (asynq forwards retried tasks every 5s by default) and
// within the Wait bound. 0 means no task waits.
func WithMaxWaiters(n int) Option { return func(c *config) { c.maxWaiters = n } }

// WithFencing acquires locks with fencing tokens (see LockFromContext).
func WithFencing() Option { return func(c *config) { c.fencing = true } }

// WithMaxHold caps how long one task keeps its lock (0: no cap); past it the
// lock is lost and the handler's context cancelled.
func WithMaxHold(d time.Duration) Option { return func(c *config) { c.maxHold = d } }

// WithProgress switches to progress mode: the lock is extended only while
// the handler calls Progress(ctx) at least once per stall; a handler that
// stops reporting loses the lock within stall + TTL.
func WithProgress(stall time.Duration) Option { return func(c *config) { c.progress = stall } }

// WithRollback installs the rollback hook.
func WithRollback(f RollbackFunc) Option { return func(c *config) { c.rollback = f } }

// WithRollbackTimeout bounds re-acquiring a lost lock and running the
// rollback (default 30s).
func WithRollbackTimeout(d time.Duration) Option { return func(c *config) { c.rollbackTimeout = d } }

// WithEnqueuer lets the middleware resubmit a task that meets a conflict on
// its last retry (asynq would archive it on any error). The copy keeps the
// type, payload, headers, queue and what is left of the retry budget; with
// WithInspector also the timeout, deadline and retention. If resubmitting
// fails twice, the copy may still have been stored (a lost reply): with
// WithInspector, a copy the broker confirms absent makes the task wait for
// its lock instead (a copy stored late is deleted before it runs); otherwise
// the task is archived rather than risk running it twice.
func WithEnqueuer(e Enqueuer) Option { return func(c *config) { c.enqueuer = e } }

// WithInspector lets a resubmitted task keep the original's timeout,
// deadline and retention, which asynq does not pass to handlers: the
// middleware looks the task up first (one broker round trip, only on a
// conflict on a last retry). Without it, or if the lookup fails, the copy
// gets the queue's defaults for them. It also lets a task whose
// resubmission failed run in place instead of being archived (see
// WithEnqueuer). Each lookup is bounded by 5s.
func WithInspector(i TaskInspector) Option { return func(c *config) { c.inspector = i } }

// WithParking lets the middleware park tasks that meet a busy resource,
// using broker, a client to the asynq broker's Redis (the one the server
// dequeues from). A parked task stays in asynq's retry set (a copy in its
// scheduled set on a last retry, which needs WithEnqueuer), is recorded in a
// FIFO per queue and resource next to the queue's keys, and is moved to the
// front of its queue when a task of its resource starts running; a backstop
// delay brings it back by itself if nobody does (see WithParkBackstop). A
// task is parked at most once: when it meets the resource busy again it
// waits for the lock (within the Wait bound). The records are hints that
// expire; the task itself never leaves asynq. Parking applies under the Wait
// and Requeue policies and needs the server's IsFailure and RetryDelayFunc
// from this package (asynq would otherwise count a parking as a failure and
// choose its own delay). Default: off (tasks are requeued on a timer).
func WithParking(broker redis.UniversalClient) Option {
	return func(c *config) { c.broker = broker }
}

// WithParkBackstop sets how long a parked task stays in the retry set if no
// task of its resource promotes it (default 0: four times the measured hold
// time of the tasks parked ahead of it, within 2s..1m).
func WithParkBackstop(d time.Duration) Option { return func(c *config) { c.backstop = d } }

// WithLogger sets the structured logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver installs a hook for metrics: acquisitions, conflicts by
// policy, losses, rollbacks, bad keys. It must be fast and not block.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }
