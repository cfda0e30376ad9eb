package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest/embedded"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// perTenant is the limit: imports of one tenant running at once.
const perTenant = 3

// imports is the handler: it records, per tenant, the imports done and the
// most that ran at once.
type imports struct {
	mu     sync.Mutex
	now    map[string]int
	peak   map[string]int
	done   map[string]int
	remain int
}

type importTask struct {
	Tenant string `json:"tenant"`
	File   string `json:"file"`
}

func (im *imports) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var p importTask
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	im.mu.Lock()
	im.now[p.Tenant]++
	im.peak[p.Tenant] = max(im.peak[p.Tenant], im.now[p.Tenant])
	im.mu.Unlock()
	select { // the import's work
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	im.mu.Lock()
	im.now[p.Tenant]--
	im.done[p.Tenant]++
	im.remain--
	im.mu.Unlock()
	return nil
}

func run(ctx context.Context, out io.Writer) error {
	urls, stop, err := embedded.StartN(4) // 3 lock nodes and a broker
	if err != nil {
		return err
	}
	defer stop()
	broker := asynq.RedisClientOpt{Addr: strings.TrimPrefix(urls[3], "redis://")}
	tasks := enqueueList()
	im := &imports{now: map[string]int{}, peak: map[string]int{}, done: map[string]int{}, remain: len(tasks)}
	for range 2 { // two worker processes
		stopWorker, err := startWorker(urls, broker, im)
		if err != nil {
			return err
		}
		defer stopWorker()
	}
	if err := enqueue(ctx, broker, tasks); err != nil {
		return err
	}
	if err := waitDone(im, 30*time.Second); err != nil {
		return err
	}
	im.print(out)
	return nil
}

// startWorker starts one worker, with its own lock client and broker
// client as a separate process would have, and returns its stop.
func startWorker(urls []string, broker asynq.RedisClientOpt, h asynq.Handler) (func(), error) {
	// A patient node timeout: the embedded nodes share this process's CPU.
	locks, err := redlock.NewFromURLs(urls[:3], redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	brokerRedis := redis.NewClient(&redis.Options{Addr: broker.Addr})
	mux := asynq.NewServeMux()
	mux.Handle("tenant:import", middleware.Lock(locks, middleware.ByField("tenant"),
		middleware.WithLimit(perTenant), // at most 3 imports per tenant at once, across workers
		middleware.WithBroker(brokerRedis),
	)(h))
	srv := asynq.NewServer(broker, asynq.Config{
		Concurrency:              8,
		IsFailure:                middleware.IsFailure,
		RetryDelayFunc:           middleware.RetryDelay,
		TaskCheckInterval:        50 * time.Millisecond,
		DelayedTaskCheckInterval: 50 * time.Millisecond,
		LogLevel:                 asynq.FatalLevel,
	})
	stop := func() {
		srv.Shutdown()
		_ = brokerRedis.Close()
		_ = locks.Close()
	}
	if err := srv.Start(mux); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// enqueueList is 12 imports of acme's files and 4 of globex's.
func enqueueList() []importTask {
	var tasks []importTask
	for i := range 12 {
		tasks = append(tasks, importTask{Tenant: "acme", File: fmt.Sprintf("acme-%02d.csv", i)})
	}
	for i := range 4 {
		tasks = append(tasks, importTask{Tenant: "globex", File: fmt.Sprintf("globex-%02d.csv", i)})
	}
	return tasks
}

func enqueue(ctx context.Context, broker asynq.RedisClientOpt, tasks []importTask) error {
	client := asynq.NewClient(broker)
	defer client.Close()
	for _, p := range tasks {
		b, _ := json.Marshal(p)
		if _, err := client.EnqueueContext(ctx, asynq.NewTask("tenant:import", b)); err != nil {
			return err
		}
	}
	return nil
}

// waitDone waits until every import ran, at most limit.
func waitDone(im *imports, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		im.mu.Lock()
		remain := im.remain
		im.mu.Unlock()
		if remain == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("imports not done after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (im *imports) print(out io.Writer) {
	im.mu.Lock()
	defer im.mu.Unlock()
	tenants := make([]string, 0, len(im.done))
	for t := range im.done {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	for _, t := range tenants {
		fmt.Fprintf(out, "%s: %d imports, at most %d at once (limit %d)\n", t, im.done[t], im.peak[t], perTenant)
	}
}
