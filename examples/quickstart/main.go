// Command quickstart is the README's quick start: a worker whose
// "stock:adjust" tasks run one at a time per SKU. It reads its
// configuration from the environment (ASYNQ_REDIS_URL, REDLOCK_NODES, ...),
// serves until SIGINT or SIGTERM and exits 0 after that clean shutdown, or 1
// when it cannot start or fails.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1) // a failure; a requested shutdown returns nil and exits 0
	}
}

func run(ctx context.Context) error {
	cfg, err := worker.LoadConfig() // ASYNQ_REDIS_URL, REDLOCK_NODES, ...: every bad variable reported at once
	if err != nil {
		return err
	}
	w, err := worker.New(cfg) // asynq server + lock middleware (busy tasks parked in the broker) + metrics + health + SIGTERM
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Handle("stock:adjust", asynq.HandlerFunc(adjustStock), middleware.ByField("sku"), middleware.WithRollback(undoAdjustment)); err != nil {
		return err
	}
	return w.Run(ctx) // until SIGINT/SIGTERM (nil), or a failure; in-flight locks released
}

// adjustStock runs alone for its SKU; ctx is cancelled if the lock is lost, and
// middleware.LockFromContext(ctx) gives the lock (resource, token, fence).
func adjustStock(ctx context.Context, t *asynq.Task) error { return nil /* your update */ }

func undoAdjustment(ctx context.Context, t *asynq.Task, cause error) error { return nil }
