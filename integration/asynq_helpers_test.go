package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// quietAsynq drops asynq's own log lines below errors.
type quietAsynq struct{}

func (quietAsynq) Debug(...any) {}
func (quietAsynq) Info(...any)  {}
func (quietAsynq) Warn(...any)  {}
func (quietAsynq) Error(...any) {}
func (quietAsynq) Fatal(...any) {}

// serverConfig is an asynq server config wired for the middleware: conflicts
// are not failures and come back soon.
func serverConfig(concurrency int) asynq.Config {
	return asynq.Config{
		Concurrency:              concurrency,
		IsFailure:                middleware.IsFailure,
		RetryDelayFunc:           middleware.RetryDelay,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        50 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		Logger:                   quietAsynq{},
		LogLevel:                 asynq.FatalLevel,
	}
}

// startServer runs an asynq server with handler until the test ends.
func startServer(t *testing.T, broker *redistest.Node, cfg asynq.Config, handler asynq.Handler) *asynq.Server {
	t.Helper()
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: broker.Addr()}, cfg)
	if err := srv.Start(handler); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func asynqClient(t *testing.T, broker *redistest.Node) *asynq.Client {
	t.Helper()
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: broker.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func inspector(t *testing.T, broker *redistest.Node) *asynq.Inspector {
	t.Helper()
	i := asynq.NewInspector(asynq.RedisClientOpt{Addr: broker.Addr()})
	t.Cleanup(func() { _ = i.Close() })
	return i
}

// adjustment is the payload of an inventory task.
type adjustment struct {
	ID    int    `json:"id"`
	SKU   string `json:"sku"`
	Delta int64  `json:"delta"`
}

func enqueueAdjustments(t *testing.T, c *asynq.Client, adj []adjustment, opts ...asynq.Option) {
	t.Helper()
	for _, a := range adj {
		b, _ := json.Marshal(a)
		if _, err := c.Enqueue(asynq.NewTask("stock:adjust", b), opts...); err != nil {
			t.Fatal(err)
		}
	}
}

// inventory is the handler's world: a stock per SKU in a Redis store, read
// and written in two steps (the update is lost if two handlers interleave),
// and a record of which task IDs were applied.
type inventory struct {
	store   *redis.Client
	work    time.Duration
	mu      sync.Mutex
	applied map[int]int       // payload id -> times applied
	doneAt  map[int]time.Time // payload id -> completion
}

func newInventory(t *testing.T, store *redistest.Node, work time.Duration) *inventory {
	return &inventory{store: store.Client(t), work: work, applied: map[int]int{}, doneAt: map[int]time.Time{}}
}

func (inv *inventory) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var a adjustment
	if err := json.Unmarshal(t.Payload(), &a); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	// Idempotent, as a handler under at-least-once delivery must be: a
	// retry of a task whose write landed but whose reply was lost (a store
	// timeout on a loaded machine) finds its mark and applies nothing again,
	// while a second run of a completed task still counts as a second run.
	// The lock is what keeps two different tasks' read and write apart.
	key, mark := "stock:"+a.SKU, "applied:"+strconv.Itoa(a.ID)
	if n, err := inv.store.Exists(ctx, mark).Result(); err != nil {
		return err
	} else if n == 1 {
		inv.record(a.ID)
		return nil
	}
	v, err := inv.store.Get(ctx, key).Int64()
	if err != nil && err != redis.Nil {
		return err
	}
	time.Sleep(inv.work)
	_, err = inv.store.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, v+a.Delta, 0)
		p.Set(ctx, mark, 1, 0)
		return nil
	})
	if err != nil {
		return err
	}
	inv.record(a.ID)
	return nil
}

// record counts a run of task id that found its update applied.
func (inv *inventory) record(id int) {
	inv.mu.Lock()
	inv.applied[id]++
	inv.doneAt[id] = time.Now()
	inv.mu.Unlock()
}

func (inv *inventory) done() int {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return len(inv.applied)
}

// waitDone waits (bounded) until n distinct tasks were applied.
func (inv *inventory) waitDone(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for inv.done() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d tasks done after %v", inv.done(), n, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lost sums, over SKUs, how far the stock is from the expected total.
func (inv *inventory) lost(t *testing.T, expected map[string]int64) int64 {
	t.Helper()
	var lost int64
	for sku, want := range expected {
		got, err := inv.store.Get(context.Background(), "stock:"+sku).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if d := want - got; d != 0 {
			lost += max(d, -d)
		}
	}
	return lost
}

// waitQueueEmpty waits (bounded) until nothing is pending, active, scheduled
// or in retry, and returns the queue's final state.
func waitQueueEmpty(t *testing.T, insp *asynq.Inspector, limit time.Duration) *asynq.QueueInfo {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		qi, err := insp.GetQueueInfo("default")
		if err != nil {
			t.Fatal(err)
		}
		if qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 {
			return qi
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not drained after %v: %+v", limit, qi)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitUntil polls cond every 20ms for up to limit and reports whether it
// held.
func waitUntil(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
