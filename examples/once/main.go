// Command once shows a broker outage without double-applied updates: asynq
// delivers a task again when the broker missed its completion, and the
// lock's completion record keeps that delivery from running the handler a
// second time. With -records=false (the control) the same run applies those
// tasks twice.
//
// Everything runs in-process: 3 embedded lock nodes, an embedded asynq
// broker (stopped and restarted with its data on the same address) and an
// embedded stock store. Two worker replicas (worker.New) apply +1 stock
// updates, each a read-modify-write that is not idempotent on purpose. A
// sixth of the way in, the broker goes down for 2s while handlers are
// returning: their locks are released and their completion records written
// on the lock nodes, but asynq cannot mark their tasks done, and it does not
// try again (asynq v0.26 retries that write with a context already
// cancelled). The broker comes back with its data, still listing those tasks
// as running; the demo waits until every task is completed, then prints each
// SKU's expected and actual stock and what happened to the re-deliveries.
// The replicas' warnings about the outage go to stderr.
//
// It takes about 65s, and asynq decides most of it: a task listed as running
// has a lease of 30s from its last heartbeat, and asynq's recoverer takes it
// back once its lease has been expired for 30s, at a pass that each server
// runs at its start and then every minute. The demo starts a third replica
// as soon as the missed tasks are due, so that its first pass takes them
// back; the pass of the replicas already running might come up to a minute
// later.
//
// Tasks keep asynq's own options under the lock: a busy task keeps its
// TaskID and Unique lock while it waits, Retention keeps it completed under
// its ID, a MaxRetry(0) task is parked (in asynq's archive) rather than
// copied as "id~r1", and a Timeout shorter than its wait costs no retry.
//
//	go run ./examples/once                  # re-deliveries skipped: every SKU exact
//	go run ./examples/once -records=false   # the control: those tasks applied twice
//
// A real handler also closes the window records leave (a worker killed
// between the handler's return and the release) in its own store, with
// middleware.TaskKeyFromContext: examples/inventory shows how.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	cfg := defaults()
	flag.BoolVar(&cfg.records, "records", true, "completion records (false: the control, at-least-once delivery as is)")
	flag.IntVar(&cfg.tasks, "tasks", cfg.tasks, "stock updates, +1 each")
	flag.IntVar(&cfg.skus, "skus", cfg.skus, "SKUs the updates are spread over")
	flag.DurationVar(&cfg.work, "work", cfg.work, "time between reading and writing a SKU's stock")
	flag.DurationVar(&cfg.down, "down", cfg.down, "how long the broker stays down")
	flag.Parse()
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "once:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "once:", err)
		os.Exit(1)
	}
	if res.redelivered() == 0 || cfg.records && res.off != 0 {
		os.Exit(1)
	}
}

type config struct {
	records bool
	tasks   int
	skus    int
	work    time.Duration
	down    time.Duration
}

func defaults() config {
	return config{records: true, tasks: 240, skus: 4, work: 20 * time.Millisecond, down: 2 * time.Second}
}

func (c config) validate() error {
	var errs []error
	if c.skus < 1 || c.tasks < 3*c.skus {
		errs = append(errs, fmt.Errorf("-skus must be at least 1 and -tasks at least 3 per SKU, got %d and %d", c.skus, c.tasks))
	}
	if c.work < time.Millisecond || c.work > time.Second {
		errs = append(errs, fmt.Errorf("-work must be in [1ms, 1s] (handlers must be returning when the broker goes down), got %v", c.work))
	}
	// A completion the broker missed is lost whatever the outage's length;
	// past 25s asynq's own leases would lapse in the handlers too.
	if c.down < 100*time.Millisecond || c.down > 20*time.Second {
		errs = append(errs, fmt.Errorf("-down must be in [100ms, 20s], got %v", c.down))
	}
	return errors.Join(errs...)
}
