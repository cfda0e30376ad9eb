package readme

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// decorate is the README's middleware snippet: an asynq server whose
// handlers run under a fenced lock per order SKU; brokerRedis is for the
// caller to close.
func decorate(redisOpt asynq.RedisClientOpt, rollback func(context.Context, *asynq.Task, error) error) (*asynq.Server, *asynq.ServeMux, *redis.Client) {
	// README:begin decorate
	locks, _ := redlock.NewFromURLs(strings.Split(os.Getenv("REDLOCK_NODES"), ","))
	// brokerRedis: a go-redis client to the broker asynq uses (redisOpt, an asynq.RedisClientOpt), where busy tasks are parked.
	brokerRedis := redis.NewClient(&redis.Options{Addr: redisOpt.Addr, Username: redisOpt.Username, Password: redisOpt.Password, DB: redisOpt.DB})
	mux := asynq.NewServeMux()
	// The one choice to make: a lock per task type and key ("task:<type>:<key>", the default: stock:adjust
	// and stock:batch on one SKU may run at once), or per key across types (add middleware.WithSharedKeys()).
	mux.Use(middleware.Lock(locks, middleware.ByField("order.sku"), // or ByType(), ByPayloadHash(), your KeyFunc
		middleware.Wait(2*time.Second),                    // Wait(d) | Requeue() | Skip() | Fail()
		middleware.WithRollback(rollback),                 // runs under the lock on error or loss
		middleware.WithBroker(brokerRedis),                // park busy tasks once, promote them in turn
		middleware.WithLockOptions(redlock.WithFencing()), // lock, _ := middleware.LockFromContext(ctx); lock.Fence
	))
	srv := asynq.NewServer(redisOpt, asynq.Config{
		IsFailure:      middleware.IsFailure,  // a conflict is not a failure...
		RetryDelayFunc: middleware.RetryDelay, // ...and comes back paced to the resource's hold time
	})
	// README:end
	return srv, mux, brokerRedis
}

// cronSingleton is the README's robfig/cron snippet.
func cronSingleton(locks *redlock.Client, job cron.Job) *cron.Cron {
	// README:begin cron
	c := cron.New(cron.WithSeconds())
	c.AddJob("*/10 * * * * *", cron.NewChain(scheduler.Singleton(locks, "cleanup")).Then(job))
	c.Start()
	// or for every job of the cron: cron.New(cron.WithChain(scheduler.Singleton(locks, "svc")))
	// README:end
	return c
}

// schedule is the README's Scheduler snippet.
func schedule(ctx context.Context, locks *redlock.Client, asynqClient *asynq.Client, buildReport func(context.Context) error) {
	sched, _ := scheduler.New(locks) // specs in UTC unless WithLocation or CRON_TZ= says otherwise
	sched.Register("nightly-report", "0 0 2 * * *", func(ctx context.Context) error {
		return buildReport(ctx) // once per tick across all replicas; ctx cancelled on lock loss
	}, scheduler.WithCatchUp(2*time.Hour)) // a tick missed while every replica was down runs when one is back
	sched.RegisterTask("sync-prices", "*/30 * * * * *", asynqClient, asynq.NewTask("prices:sync", nil)) // enqueued once per tick
	sched.Start()
	defer sched.Stop(ctx)
	for _, e := range sched.Entries() {
		fmt.Println(e.Job, e.Next, e.Last.Outcome, e.RanBy)
	}
}

// store is a storage that remembers the largest fence it accepted and
// rejects a write with a smaller one: what the README's redlock snippet
// writes to.
type store struct {
	mu      sync.Mutex
	fence   int64
	records []string
}

var errStaleFence = errors.New("store: stale fence")

// Write stores record unless a write with a larger fence came first.
func (s *store) Write(ctx context.Context, fence int64, record string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.fence {
		return fmt.Errorf("%w: %d < %d", errStaleFence, fence, s.fence)
	}
	s.fence = fence
	s.records = append(s.records, record)
	return nil
}

// perResource is the README's redlock snippet: a Run, then a lock taken by
// hand (at once if free, else waiting for it) and written under its fence.
func perResource(ctx context.Context, locks *redlock.Client, adjust func(context.Context, string, int) error, store *store, record string) error {
	// README:begin redlock
	err := locks.Run(ctx, "sku:A-100", 8*time.Second, func(ctx context.Context) error {
		return adjust(ctx, "A-100", -3) // kept alive; ctx cancelled with cause redlock.ErrLockLost on loss
	}, redlock.WithFencing())
	if err != nil {
		return err
	}

	lock, err := locks.TryAcquire(ctx, "report", 30*time.Second, redlock.WithFencing()) // one attempt
	switch {
	case errors.Is(err, redlock.ErrLocked): // another holder: wait for it
		lock, err = locks.Acquire(ctx, "report", 30*time.Second, redlock.WithFencing()) // woken on release
	case errors.Is(err, redlock.ErrQuorum): // too many nodes down; *redlock.NodeError via errors.As
	}
	if err != nil {
		return err
	}
	defer lock.Release(context.WithoutCancel(ctx)) // runs after stop(): hands the lock to a waiter
	work, stop := lock.KeepAlive(ctx)              // extends every ttl/3; cancelled before Until() on loss
	defer stop()
	if err := store.Write(work, lock.Fence(), record); err != nil { // storage rejects smaller fences
		return err
	}
	// README:end
	return nil
}

// limits is the README's Limits snippet: per-key and per-type limits on
// handlers, and a slot taken directly.
func limits(ctx context.Context, locks *redlock.Client, mux *asynq.ServeMux, importFile, charge asynq.Handler) error {
	// README:begin limits
	// At most 3 imports per tenant at once, across every worker and process:
	mux.Handle("tenant:import", middleware.Lock(locks, middleware.ByField("tenant"),
		middleware.WithLimit(3))(importFile))
	// At most 10 calls to the payment provider at once in the cluster (per task type):
	mux.Handle("payment:charge", middleware.Lock(locks, middleware.ByType(),
		middleware.WithLimit(10))(charge))
	// Or directly: one of 10 slots, each a Redlock lock of its own.
	lock, err := locks.Acquire(ctx, "payment-provider", 30*time.Second, redlock.WithLimit(10))
	if err != nil {
		return err
	}
	fmt.Println("holding slot", lock.Slot())
	return lock.Release(ctx)
	// README:end
}
