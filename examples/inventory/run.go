package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// adjustment is a task's payload.
type adjustment struct {
	SKU   string `json:"sku"`
	Delta int64  `json:"delta"`
}

type result struct {
	lost    int64 // stock units off, over all SKUs
	skusOff int
}

const initialStock = 1000

func run(ctx context.Context, cfg config, out io.Writer) (result, error) {
	srv, err := startServers(out)
	if err != nil {
		return result{}, err
	}
	defer srv.stop()
	storeOpt, err := redis.ParseURL(srv.store)
	if err != nil {
		return result{}, fmt.Errorf("INVENTORY_STORE_URL: %w", err)
	}
	store := redis.NewClient(storeOpt)
	defer store.Close()

	skus := make([]string, cfg.skus)
	for i := range skus {
		skus[i] = fmt.Sprintf("SKU-%03d", i)
	}
	skus[0] = "SKU-HOT"
	for _, s := range skus {
		if err := store.Set(ctx, "stock:"+s, initialStock, 0).Err(); err != nil {
			return result{}, fmt.Errorf("inventory store: %w", err)
		}
	}

	// The replicas: each a worker with its own lock client and asynq server.
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var replicas []*worker.Worker
	finished := make(chan error, cfg.replicas)
	failed := make(chan error, cfg.replicas) // a replica that stopped on its own
	for r := range cfg.replicas {
		w, err := newReplica(cfg, srv, store)
		if err != nil {
			return result{}, err
		}
		replicas = append(replicas, w)
		go func() {
			err := w.Run(wctx)
			if err != nil && wctx.Err() == nil {
				failed <- fmt.Errorf("replica %d stopped: %w", r+1, err)
			}
			finished <- err
		}()
	}
	defer func() {
		stopWorkers()
		for range replicas {
			<-finished
		}
	}()

	// The adjustments, and what each SKU must end at.
	rng := rand.New(rand.NewPCG(42, 7))
	expected := map[string]int64{}
	mode := "with a lock per SKU"
	if cfg.noLock {
		mode = "WITHOUT locks"
	}
	fmt.Fprintf(out, "enqueuing %d adjustments over %d SKUs (%.0f%% on SKU-HOT) for %d replicas x %d workers, %s\n",
		cfg.updates, cfg.skus, cfg.hot*100, cfg.replicas, cfg.concurrency, mode)
	enq := replicas[0].Client()
	for range cfg.updates {
		sku := skus[0]
		if rng.Float64() >= cfg.hot {
			sku = skus[1+rng.IntN(len(skus)-1)]
		}
		delta := int64(rng.IntN(11) - 5)
		if delta == 0 {
			delta = 1
		}
		expected[sku] += delta
		b, _ := json.Marshal(adjustment{SKU: sku, Delta: delta})
		if _, err := enq.EnqueueContext(ctx, asynq.NewTask("stock:adjust", b)); err != nil {
			return result{}, fmt.Errorf("enqueue: %w", err)
		}
	}

	start := time.Now()
	if err := waitDrained(ctx, srv.broker, cfg.updates, start, failed, out); err != nil {
		return result{}, err
	}
	return report(ctx, store, skus, expected, cfg, mode, time.Since(start), out)
}

// newReplica builds one worker replica of the demo.
func newReplica(cfg config, srv *servers, store *redis.Client) (*worker.Worker, error) {
	wcfg, err := worker.LoadConfigFrom(map[string]string{
		"ASYNQ_REDIS_URL":         srv.broker,
		"REDLOCK_NODES":           strings.Join(srv.nodes, ","),
		"REDLOCK_TTL":             "5s",
		"WORKER_CONCURRENCY":      fmt.Sprint(cfg.concurrency),
		"WORKER_SHUTDOWN_TIMEOUT": "5s",
		"METRICS_ADDR":            "",
	})
	if err != nil {
		return nil, err
	}
	w, err := worker.New(wcfg, worker.WithLogger(cfg.logs))
	if err != nil {
		return nil, err
	}
	var key middleware.KeyFunc
	if !cfg.noLock {
		key = middleware.ByField("sku")
	}
	err = w.HandleFunc("stock:adjust", func(ctx context.Context, t *asynq.Task) error {
		var a adjustment
		if err := json.Unmarshal(t.Payload(), &a); err != nil {
			return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
		}
		// A read-modify-write: correct only if nobody else touches the SKU.
		stock, err := store.Get(ctx, "stock:"+a.SKU).Int64()
		if err != nil {
			return err
		}
		time.Sleep(cfg.work)
		return store.Set(ctx, "stock:"+a.SKU, stock+a.Delta, 0).Err()
	}, key)
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// waitDrained shows progress until n tasks were processed and the queue is
// empty.
func waitDrained(ctx context.Context, broker string, n int, start time.Time, failed <-chan error, out io.Writer) error {
	opt, err := asynq.ParseRedisURI(broker)
	if err != nil {
		return err
	}
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-tick.C:
		}
		qi, err := insp.GetQueueInfo("default")
		if err != nil {
			return fmt.Errorf("broker: %w", err)
		}
		fmt.Fprintf(out, "  %5d / %d done, %d waiting, %d retrying (%v)\n", qi.Processed, n, qi.Pending+qi.Active, qi.Retry+qi.Scheduled, time.Since(start).Round(100*time.Millisecond))
		if qi.Processed >= n && qi.Pending+qi.Active+qi.Retry+qi.Scheduled == 0 {
			if qi.Archived > 0 {
				return fmt.Errorf("%d tasks archived", qi.Archived)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("tasks not done after 5 minutes")
		}
	}
}

// report prints expected vs actual stock per SKU.
func report(ctx context.Context, store *redis.Client, skus []string, expected map[string]int64, cfg config, mode string, took time.Duration, out io.Writer) (result, error) {
	var res result
	fmt.Fprintf(out, "\n%-8s %9s %9s %6s\n", "SKU", "expected", "actual", "off")
	for _, s := range skus {
		got, err := store.Get(ctx, "stock:"+s).Int64()
		if err != nil {
			return res, fmt.Errorf("inventory store: %w", err)
		}
		want := initialStock + expected[s]
		off := max(want-got, got-want)
		if off != 0 {
			res.skusOff++
		}
		res.lost += off
		fmt.Fprintf(out, "%-8s %9d %9d %6d\n", s, want, got, off)
	}
	fmt.Fprintf(out, "\n%d adjustments in %v %s: %d SKUs wrong, %d stock units lost\n",
		cfg.updates, took.Round(time.Millisecond), mode, res.skusOff, res.lost)
	return res, nil
}
