package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const initialStock = 1000

// result is what a run found.
type result struct {
	tasks   int
	again   int   // handler runs beyond a task's first
	skipped int   // deliveries that found their completion record
	off     int64 // stock units off, over all SKUs
	skusOff int
}

func (r result) redelivered() int { return r.again + r.skipped }

// run is the demo; the time it prints covers all of it, servers included.
func run(ctx context.Context, cfg config, out io.Writer) (result, error) {
	start := time.Now()
	srv, err := startServers()
	if err != nil {
		return result{}, err
	}
	defer srv.stop()
	fmt.Fprintln(out, "3 embedded lock nodes, an embedded asynq broker (its data kept when it restarts), an embedded stock store")
	storeOpt, err := redis.ParseURL(srv.store)
	if err != nil {
		return result{}, err
	}
	store := redis.NewClient(storeOpt)
	defer store.Close()
	skus, expected, err := seed(ctx, store, cfg)
	if err != nil {
		return result{}, err
	}
	if err := enqueueAll(srv, skus, cfg.tasks); err != nil {
		return result{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	rs := &replicas{cfg: cfg, srv: srv, h: &stock{store: store, work: cfg.work, runs: map[string]int{}}, ctx: rctx,
		logs: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), failed: make(chan error, 3)}
	defer func() { cancel(); rs.running.Wait() }()
	for range 2 {
		if err := rs.start(); err != nil {
			return result{}, err
		}
	}
	records := "completion records ON (WORKER_COMPLETION_WINDOW=1h)"
	if !cfg.records {
		records = "completion records OFF (the control)"
	}
	fmt.Fprintf(out, "%d stock updates (+1 each, read-modify-write) over %d SKUs, 2 worker replicas, %s\n", cfg.tasks, cfg.skus, records)
	if err := outage(ctx, cfg, rs, start, out); err != nil {
		return result{}, err
	}
	if err := waitDone(ctx, cfg, rs, start, out); err != nil {
		return result{}, err
	}
	return report(ctx, store, rs, skus, expected, time.Since(start), out)
}

// seed names the SKUs, sets each one's stock, and returns how many updates
// each one gets.
func seed(ctx context.Context, store *redis.Client, cfg config) ([]string, map[string]int64, error) {
	skus := make([]string, cfg.skus)
	expected := map[string]int64{}
	for i := range skus {
		skus[i] = fmt.Sprintf("SKU-%d", i+1)
		if err := store.Set(ctx, "stock:"+skus[i], initialStock, 0).Err(); err != nil {
			return nil, nil, fmt.Errorf("stock store: %w", err)
		}
	}
	for i := range cfg.tasks {
		expected[skus[i%len(skus)]]++
	}
	return skus, expected, nil
}

// enqueue submits the updates, the SKUs in turn, from a few goroutines at
// once: one at a time, the round trips to the embedded broker would take
// longer than the tasks.
func enqueue(c *asynq.Client, skus []string, n int) error {
	const senders = 8
	var next atomic.Int64
	errs := make(chan error, senders)
	for range senders {
		go func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				b, _ := json.Marshal(update{SKU: skus[i%len(skus)]})
				if _, err := c.Enqueue(asynq.NewTask("stock:add", b)); err != nil {
					errs <- fmt.Errorf("enqueue: %w", err)
					return
				}
			}
			errs <- nil
		}()
	}
	var err error
	for range senders {
		err = errors.Join(err, <-errs)
	}
	return err
}

// enqueueAll enqueues the updates with a client of its own.
func enqueueAll(srv *servers, skus []string, n int) error {
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.broker.Addr()})
	defer c.Close()
	return enqueue(c, skus, n)
}

// at formats the time since the run's start.
func at(start time.Time) string { return fmt.Sprintf("%6.1fs", time.Since(start).Seconds()) }
