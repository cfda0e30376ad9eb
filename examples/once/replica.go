package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/worker"
)

// replicas are the worker replicas of a run, each a worker.New as a user
// runs it, with its own lock client and asynq server.
type replicas struct {
	cfg     config
	srv     *servers
	h       *stock
	logs    *slog.Logger
	ctx     context.Context
	failed  chan error // a replica that stopped on its own
	running sync.WaitGroup
	started []*worker.Worker
}

// start builds and runs one more replica.
func (rs *replicas) start() error {
	window := "1h"
	if !rs.cfg.records {
		window = "0"
	}
	wcfg, err := worker.LoadConfigFrom(map[string]string{
		"ASYNQ_REDIS_URL":           rs.srv.broker.URL(),
		"REDLOCK_NODES":             strings.Join(rs.srv.nodes, ","),
		"REDLOCK_TTL":               "10s",
		"REDLOCK_NODE_TIMEOUT":      "3s", // in-process nodes cannot fail; a busy machine can be slow (examples/inventory)
		"WORKER_READINESS_INTERVAL": "9s",
		"WORKER_CONCURRENCY":        "4",
		"WORKER_SHUTDOWN_TIMEOUT":   "5s",
		"WORKER_COMPLETION_WINDOW":  window,
		"METRICS_ADDR":              "",
	})
	if err != nil {
		return err
	}
	w, err := worker.New(wcfg, worker.WithLogger(rs.logs))
	if err != nil {
		return err
	}
	if err := w.Handle("stock:add", rs.h, middleware.ByField("sku")); err != nil {
		w.Close()
		return err
	}
	rs.started = append(rs.started, w)
	n := len(rs.started)
	rs.running.Go(func() {
		if err := w.Run(rs.ctx); err != nil && rs.ctx.Err() == nil {
			rs.failed <- fmt.Errorf("replica %d stopped: %w", n, err)
		}
	})
	return nil
}

// skipped sums the replicas' asynqlock_task_redeliveries_skipped_total: the
// deliveries that found their task's completion record.
func (rs *replicas) skipped() (int, error) {
	total := 0.0
	for _, w := range rs.started {
		families, err := w.Registry().Gather()
		if err != nil {
			return 0, err
		}
		for _, f := range families {
			if f.GetName() != "asynqlock_task_redeliveries_skipped_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return int(total), nil
}
