package worker_test

import (
	"context"
	"fmt"
	"os"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
)

// A worker's main: exit code 0 after SIGINT/SIGTERM (Run returns nil on a
// requested shutdown), 1 when it cannot start or fails. Not run here: it
// needs ASYNQ_REDIS_URL and REDLOCK_NODES (examples/quickstart runs it).
func Example() {
	run := func(ctx context.Context) error {
		cfg, err := worker.LoadConfig()
		if err != nil {
			return err
		}
		w, err := worker.New(cfg)
		if err != nil {
			return err
		}
		defer w.Close()
		err = w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return nil // runs alone for its SKU
		}), middleware.ByField("sku"))
		if err != nil {
			return err
		}
		return w.Run(ctx)
	}
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
