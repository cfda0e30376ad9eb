package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest"
	"github.com/hibiken/asynq"
)

// journal collects what the handlers and the middleware did.
type journal struct {
	mu      sync.Mutex
	lines   []string
	skipped chan struct{} // closed when a duplicate e-mail is skipped
	once    sync.Once
}

func newJournal() *journal { return &journal{skipped: make(chan struct{})} }

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
	j.mu.Unlock()
}

// print writes the journal's lines in the order things happened.
func (j *journal) print(out io.Writer) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, l := range j.lines {
		fmt.Fprintln(out, l)
	}
}

// observe records the middleware's conflicts and rollbacks.
func (j *journal) observe(e middleware.Event) {
	switch e.Kind {
	case "conflict":
		j.add("conflict %s: %s -> %s", e.TaskType, e.Resource, e.Action)
		if e.TaskType == "email:send" && e.Action == "skip" {
			j.once.Do(func() { close(j.skipped) })
		}
	case "rollback":
		if e.Err != nil {
			j.add("rollback %s: %s failed: %v", e.TaskType, e.Resource, e.Err)
			return
		}
		j.add("rollback %s: %s done", e.TaskType, e.Resource)
	}
}

func run(ctx context.Context, out io.Writer) error {
	urls, stop, err := redlocktest.StartNodes(4) // 3 lock nodes and a broker
	if err != nil {
		return err
	}
	defer stop()
	// The embedded nodes share this process's CPU with the workers: a
	// patient node timeout keeps a slow answer from passing for an outage
	// (which requeues a task whatever the policy) on a loaded machine.
	locks, err := redlock.NewFromURLs(urls[:3], redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer locks.Close()
	broker := asynq.RedisClientOpt{Addr: strings.TrimPrefix(urls[3], "redis://")}
	j := newJournal()
	srv := asynq.NewServer(broker, asynq.Config{
		Concurrency:              8,
		IsFailure:                middleware.IsFailure,
		RetryDelayFunc:           middleware.RetryDelay,
		TaskCheckInterval:        50 * time.Millisecond,
		DelayedTaskCheckInterval: 50 * time.Millisecond,
		LogLevel:                 asynq.FatalLevel,
	})
	if err := srv.Start(handlers(locks, j)); err != nil {
		return err
	}
	defer srv.Shutdown()
	if err := enqueueAndDrain(ctx, broker); err != nil {
		return err
	}
	j.print(out)
	return nil
}

// handlers decorates three handlers, each with its own key and policy.
func handlers(locks *redlock.Client, j *journal) *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.Handle("stock:adjust", middleware.Lock(locks, middleware.ByField("sku"),
		middleware.Wait(5*time.Second),
		middleware.WithObserver(j.observe),
		middleware.WithRollback(func(ctx context.Context, t *asynq.Task, cause error) error {
			li, _ := middleware.LockFromContext(ctx)
			j.add("undid the reservation under %s because: %v", li.Resource, cause)
			return nil
		}),
	)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return adjust(ctx, t, j) })))
	mux.Handle("email:send", middleware.Lock(locks, middleware.ByPayloadHash(),
		middleware.Skip(), middleware.WithObserver(j.observe),
	)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		// Sending takes until the twin has been turned away (at most 5s),
		// so that the skip shows however slowly the machine fetches it.
		select {
		case <-j.skipped:
		case <-time.After(5 * time.Second):
		}
		j.add("sent e-mail %s", t.Payload())
		return nil
	})))
	mux.Handle("report:build", middleware.Lock(locks, middleware.ByType(),
		middleware.Requeue(), middleware.WithObserver(j.observe),
	)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		time.Sleep(100 * time.Millisecond)
		j.add("built report %s", t.Payload())
		return nil
	})))
	return mux
}

// adjust is the stock handler: it refuses a drop of more than 100 units.
func adjust(ctx context.Context, t *asynq.Task, j *journal) error {
	var p struct {
		SKU   string `json:"sku"`
		Delta int    `json:"delta"`
	}
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	li, _ := middleware.LockFromContext(ctx)
	time.Sleep(50 * time.Millisecond)
	if p.Delta < -100 {
		return fmt.Errorf("%w: stock of %s cannot go down by %d", asynq.SkipRetry, p.SKU, -p.Delta)
	}
	j.add("adjusted %s by %d under %s", p.SKU, p.Delta, li.Resource)
	return nil
}

// enqueueAndDrain enqueues the demo's tasks and waits, at most 30s, until
// all are processed.
func enqueueAndDrain(ctx context.Context, broker asynq.RedisClientOpt) error {
	client := asynq.NewClient(broker)
	defer client.Close()
	tasks := []*asynq.Task{
		asynq.NewTask("stock:adjust", []byte(`{"sku":"A-1","delta":5}`)),
		asynq.NewTask("stock:adjust", []byte(`{"sku":"A-1","delta":-2}`)),
		asynq.NewTask("stock:adjust", []byte(`{"sku":"B-7","delta":-500}`)),
		asynq.NewTask("email:send", []byte(`welcome:ada@example.com`)),
		asynq.NewTask("email:send", []byte(`welcome:ada@example.com`)),
		asynq.NewTask("report:build", []byte(`daily`)),
		asynq.NewTask("report:build", []byte(`weekly`)),
	}
	for _, t := range tasks {
		if _, err := client.EnqueueContext(ctx, t, asynq.Retention(time.Minute)); err != nil {
			return err
		}
	}
	insp := asynq.NewInspector(broker)
	defer insp.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		qi, err := insp.GetQueueInfo("default")
		if err != nil {
			return err
		}
		if qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 && qi.Processed >= len(tasks) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("tasks not done after 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
