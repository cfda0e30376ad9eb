// Command inventory is the main demo: three worker replicas process stock
// adjustments from an asynq queue, each task a read-modify-write of one
// SKU's stock, serialized per SKU by the lock middleware so that no update is
// lost; with -nolock the same run shows the lost updates.
//
// With no environment it starts everything in-process: five embedded lock
// nodes, an embedded asynq broker and an embedded inventory store, all with
// real-time expiry. Set ASYNQ_REDIS_URL and REDLOCK_NODES (and optionally
// INVENTORY_STORE_URL) to use real servers.
//
//	go run ./examples/inventory            # with locks: 0 lost updates
//	go run ./examples/inventory -nolock    # without: lost updates
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"
)

func main() {
	cfg := defaults()
	flag.BoolVar(&cfg.noLock, "nolock", false, "run without locks to show lost updates")
	flag.IntVar(&cfg.replicas, "replicas", cfg.replicas, "worker replicas")
	flag.IntVar(&cfg.concurrency, "concurrency", cfg.concurrency, "tasks processed at once per replica")
	flag.IntVar(&cfg.skus, "skus", cfg.skus, "number of SKUs (one of them hot)")
	flag.IntVar(&cfg.updates, "updates", cfg.updates, "stock adjustments to apply")
	flag.Float64Var(&cfg.hot, "hot", cfg.hot, "share of adjustments on the hot SKU")
	flag.DurationVar(&cfg.work, "work", cfg.work, "time between reading and writing a SKU's stock")
	flag.Parse()
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
	if res.lost != 0 && !cfg.noLock {
		os.Exit(1)
	}
}

type config struct {
	noLock      bool
	replicas    int
	concurrency int
	skus        int
	updates     int
	hot         float64
	work        time.Duration
	logs        *slog.Logger
}

func defaults() config {
	return config{replicas: 3, concurrency: 8, skus: 20, updates: 2000, hot: 0.25, work: time.Millisecond,
		logs: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
}

func (c config) validate() error {
	var errs []error
	if c.replicas < 1 {
		errs = append(errs, fmt.Errorf("-replicas must be at least 1, got %d", c.replicas))
	}
	if c.concurrency < 1 {
		errs = append(errs, fmt.Errorf("-concurrency must be at least 1, got %d", c.concurrency))
	}
	if c.skus < 2 {
		errs = append(errs, fmt.Errorf("-skus must be at least 2 (one hot, others cold), got %d", c.skus))
	}
	if c.updates < 1 {
		errs = append(errs, fmt.Errorf("-updates must be at least 1, got %d", c.updates))
	}
	if c.hot < 0 || c.hot > 1 {
		errs = append(errs, fmt.Errorf("-hot must be in [0, 1], got %v", c.hot))
	}
	if c.work < 0 {
		errs = append(errs, fmt.Errorf("-work must not be negative, got %v", c.work))
	}
	return errors.Join(errs...)
}
