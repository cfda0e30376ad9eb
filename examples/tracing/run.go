package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// hotTasks is how many adjustments of the hot SKU arrive at once.
const hotTasks = 4

// run processes the hot SKU's tasks and returns the spans recorded.
func run(ctx context.Context) (tracetest.SpanStubs, error) {
	urls, stop, err := redlocktest.StartNodes(4) // 3 lock nodes and a broker
	if err != nil {
		return nil, err
	}
	defer stop()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	// The embedded nodes share this process's CPU: a patient node timeout.
	locks, err := redlock.NewFromURLs(urls[:3], redlock.WithNodeTimeout(500*time.Millisecond), redlock.WithTracerProvider(tp))
	if err != nil {
		return nil, err
	}
	defer locks.Close()
	broker := asynq.RedisClientOpt{Addr: strings.TrimPrefix(urls[3], "redis://")}
	if err := enqueue(ctx, broker); err != nil {
		return nil, err
	}
	if err := serve(ctx, broker, locks, tp); err != nil {
		return nil, err
	}
	return exp.GetSpans(), nil
}

// serve runs the tasks through the tracing and lock middlewares until all
// are done (at most 30s).
func serve(ctx context.Context, broker asynq.RedisClientOpt, locks *redlock.Client, tp trace.TracerProvider) error {
	rc := redis.NewClient(&redis.Options{Addr: broker.Addr})
	defer rc.Close()
	mux := asynq.NewServeMux()
	mux.Use(worker.TraceTasks(tp), // first: the lock's spans are children of asynq.task
		middleware.Lock(locks, middleware.ByField("sku"), middleware.WithBroker(rc), middleware.WithTracerProvider(tp)))
	mux.HandleFunc("stock:adjust", func(ctx context.Context, t *asynq.Task) error {
		_, span := tp.Tracer("inventory").Start(ctx, "stock.update") // the handler's own span
		defer span.End()
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	srv := asynq.NewServer(broker, asynq.Config{
		Concurrency: hotTasks, IsFailure: middleware.IsFailure, RetryDelayFunc: middleware.RetryDelay,
		TaskCheckInterval: 20 * time.Millisecond, DelayedTaskCheckInterval: 50 * time.Millisecond, LogLevel: asynq.FatalLevel,
	})
	if err := srv.Start(mux); err != nil {
		return err
	}
	defer srv.Shutdown()
	return drain(ctx, broker)
}

// enqueue puts the hot SKU's adjustments in the queue before any worker
// runs, so that they meet at the lock.
func enqueue(ctx context.Context, broker asynq.RedisClientOpt) error {
	client := asynq.NewClient(broker)
	defer client.Close()
	for i := range hotTasks {
		b, _ := json.Marshal(map[string]any{"sku": "HOT-1", "delta": -1 - i})
		if _, err := client.EnqueueContext(ctx, asynq.NewTask("stock:adjust", b), asynq.Retention(time.Minute)); err != nil {
			return err
		}
	}
	return nil
}

// drain waits, at most 30s, until every task is processed.
func drain(ctx context.Context, broker asynq.RedisClientOpt) error {
	insp := asynq.NewInspector(broker)
	defer insp.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		qi, err := insp.GetQueueInfo("default")
		switch {
		case err != nil:
			return err
		case qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 && qi.Processed >= hotTasks:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("tasks not done after 30s: %d processed of %d", qi.Processed, hotTasks)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
