package worker_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlocktest/embedded"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
)

// A worker whose "stock:adjust" tasks run one at a time per SKU. A real
// main calls worker.LoadConfig() (ASYNQ_REDIS_URL, REDLOCK_NODES, ...), and
// Run serves until SIGINT or SIGTERM, returning nil: exit code 0. Here the
// broker and the three lock nodes are in-process Redis servers, and Run ends
// once the task ran.
func Example() {
	urls, stop, err := embedded.StartN(4) // in production: a broker and independent lock nodes
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	cfg, err := worker.LoadConfigFrom(map[string]string{
		"ASYNQ_REDIS_URL":      urls[0],
		"REDLOCK_NODES":        strings.Join(urls[1:], ","),
		"REDLOCK_NODE_TIMEOUT": "1s", // patient: embedded nodes share a busy CPU
		"METRICS_ADDR":         "off",
		"LOG_LEVEL":            "error",
	})
	if err != nil {
		log.Fatal(err) // every bad variable, at once
	}
	w, err := worker.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	ctx, cancel := context.WithCancel(context.Background())
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		lock, _ := middleware.LockFromContext(ctx)
		fmt.Println("adjusting under", lock.Resource) // alone for its SKU
		cancel()
		return nil
	}), middleware.ByField("sku"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", []byte(`{"sku":"A-100","delta":-3}`))); err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil { // until ctx ends or SIGINT/SIGTERM
		log.Fatal(err)
	}
	// Output: adjusting under task:stock:adjust:A-100
}
