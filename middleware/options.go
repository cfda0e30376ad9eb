package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the options.
const (
	defaultTTL             = 30 * time.Second
	defaultWait            = 2 * time.Second
	defaultMaxWaiters      = 2
	defaultRollbackTimeout = 30 * time.Second
)

// resourcePrefix is the middleware's namespace among lock resources.
const resourcePrefix = "task:"

// taskInspector looks tasks up and runs parked ones, as *asynq.Inspector.
type taskInspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	RunTask(queue, id string) error
}

type config struct {
	ttl             time.Duration
	shared          bool
	policy          policy // Wait, Requeue, Skip or Fail; default Wait(2s)
	limit           int    // WithLimit's n: holders of one resource at once
	lockOpts        []redlock.LockOption
	progress        time.Duration
	rollback        func(ctx context.Context, t *asynq.Task, cause error) error
	rollbackTimeout time.Duration
	inspector       taskInspector // brings parked tasks back (promotion, revival of a last retry's)
	broker          redis.UniversalClient
	backstop        time.Duration // a fixed park backstop; 0 (no option sets it): from measured hold times
	logger          *slog.Logger
	observer        func(Event)
	room            *room // the places to run and to wait (WithRoom); nil: the default (newMW)
	tracerProvider  trace.TracerProvider
	window          time.Duration // completion records kept this long; 0: none (once.go)
	err             error         // a refused option
}

func defaultConfig() config {
	return config{
		ttl:             defaultTTL,
		policy:          policy{action: actRequeue, wait: defaultWait},
		limit:           1,
		rollbackTimeout: defaultRollbackTimeout,
		window:          defaultWindow,
	}
}

func (c *config) validate() error {
	switch {
	case c.err != nil:
		return c.err
	case c.ttl <= 0:
		return fmt.Errorf("middleware: lock TTL must be positive, got %v", c.ttl)
	case c.policy.wait < 0:
		return fmt.Errorf("middleware: wait bound must not be negative, got %v", c.policy.wait)
	case c.limit < 1 || c.limit > lockutil.MaxLimit:
		return fmt.Errorf("middleware: limit must be in [1, %d], got %d", lockutil.MaxLimit, c.limit)
	case c.progress < 0:
		return fmt.Errorf("middleware: progress stall bound must not be negative, got %v", c.progress)
	case slices.ContainsFunc(c.lockOpts, func(o redlock.LockOption) bool { return o == nil }):
		return errors.New("middleware: nil lock option in WithLockOptions")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return nil
}

// Option configures the middleware.
type Option func(*config)

// WithTTL sets the lock's TTL. The lock is extended about every TTL/3 while
// the handler runs, so the TTL bounds how long a crashed worker keeps the
// resource. Default: 30s.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithLockOptions passes lock options to every acquisition, e.g.
// redlock.WithFencing() (the fence is then in LockFromContext). Default:
// none.
func WithLockOptions(opts ...redlock.LockOption) Option {
	return func(c *config) { c.lockOpts = append(c.lockOpts, opts...) }
}

// WithSharedKeys drops the task type from resource names ("task:<key>"
// instead of "task:<type>:<key>"), so that tasks of different types with
// the same key exclude each other. Default: off.
func WithSharedKeys() Option { return func(c *config) { c.shared = true } }

// WithLimit lets up to n tasks with the same key run at once, across every
// worker and process (redlock.WithLimit's slots); with ByType, a cluster-wide
// limit per task type (docs/guide/MIDDLEWARE.md, "Limits"). n must be in
// [1, 1024]. Default: 1, one task per key at a time.
func WithLimit(n int) Option { return func(c *config) { c.limit = n } }

// WithProgress switches to progress mode: the lock is kept alive only while
// the handler calls Progress(ctx) at least once per stall; a handler that
// stops reporting loses the lock within stall + TTL, which cancels its
// context. Default: off (the lock is kept alive until the handler returns).
func WithProgress(stall time.Duration) Option { return func(c *config) { c.progress = stall } }

// WithRollback installs a hook that undoes a task's partial work after its
// handler failed (an error or a panic) or its lock was lost. It runs while
// the lock is held (a lost lock is re-acquired first); cause is the
// handler's error or the loss, and its context carries the lock
// (LockFromContext). Its error joins the task's. Default: none.
func WithRollback(f func(ctx context.Context, t *asynq.Task, cause error) error) Option {
	return func(c *config) { c.rollback = f }
}

// WithBroker gives the middleware a client to the asynq broker's Redis (the
// one the server dequeues from), never closed by it: busy tasks, last retries
// too, are parked under their own ID and moved back to their queue when a
// task of their resource starts or ends (docs/guide/MIDDLEWARE.md, "Hot
// resources and last retries"). The server needs IsFailure and RetryDelay.
// An asynq version the suite has not run against is refused. Default: none.
func WithBroker(broker redis.UniversalClient) Option {
	return func(c *config) {
		if broker == nil {
			c.err = errors.New("middleware: WithBroker: nil broker client")
			return
		}
		if err := checkAsynq(linkedAsynq()); err != nil {
			c.err = err
			return
		}
		c.broker = broker
		c.inspector = asynq.NewInspectorFromRedisClient(broker)
	}
}

// asynqModule is the module whose task layout parking writes.
const asynqModule = "github.com/hibiken/asynq"

// asynqTested are the asynq versions the suite's parking tests passed with:
// parking writes asynq's own keys, so WithBroker refuses any other.
var asynqTested = []string{"v0.26.0"}

// linkedAsynq returns the asynq version the program is built with ("": no
// module information).
func linkedAsynq() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == asynqModule {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

// checkAsynq refuses version v unless parking was tested against it ("",
// as in a test binary, passes).
func checkAsynq(v string) error {
	if v == "" || slices.Contains(asynqTested, v) {
		return nil
	}
	return fmt.Errorf("middleware: WithBroker: parking moves tasks between asynq's own keys, a layout tested with %s %v only, "+
		"and this program is built with %s %q: require %s %s in go.mod, or leave WithBroker out (busy tasks are then requeued on a timer)",
		asynqModule, asynqTested, asynqModule, v, asynqModule, asynqTested[len(asynqTested)-1])
}

// WithRoom gives the tasks a room of places, shared by every middleware
// given this same Option value: run places for the tasks that try for their
// locks or run their handlers (run; 0: no bound, asynq's Concurrency then
// bounds them) and wait places for the tasks that wait for a busy lock
// (wait; 0: none of their own, tasks wait in run places), shared among the
// hot resources by their WithLimit slots, half the larger number at most
// each. Give asynq's server as many workers as both (docs/guide/HOTKEYS.md,
// "Waiting beside running"); tasks on their last retry may wait past the
// wait places, a busy task that finds no wait place is parked or requeued.
// Default: with WithBroker, wait places for two thirds of the most tasks
// seen at once; without, none (at most two wait for one resource).
func WithRoom(run, wait int) Option {
	r := newRoom(run, wait)
	return func(c *config) { c.room = r }
}

// WithLogger sets the structured logger. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver installs a hook for metrics, called with every Event. It
// must be fast and not block. Default: none.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }
