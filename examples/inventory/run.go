package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
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

	skus, err := seedStock(ctx, store, cfg.skus)
	if err != nil {
		return result{}, err
	}
	failed := make(chan error, cfg.replicas+1) // a replica that stopped on its own, or enqueueing
	hotDone := &hotTally{}
	replicas, stopReplicas, err := startReplicas(ctx, cfg, srv, store, hotDone, failed)
	defer stopReplicas()
	if err != nil {
		return result{}, err
	}

	// The adjustments, and what each SKU must end at.
	mode := "with a lock per SKU"
	if cfg.noLock {
		mode = "WITHOUT locks"
	}
	tasks, expected := adjustments(cfg, skus)
	fmt.Fprintf(out, "enqueuing %d adjustments over %d SKUs (%.0f%% on SKU-HOT) for %d replicas x %d workers, %s\n",
		cfg.updates, cfg.skus, cfg.hot*100, cfg.replicas, cfg.concurrency, mode)
	// The clock starts before the first enqueue: the time printed covers
	// the whole run. The workers start on the tasks as they arrive.
	start := time.Now()
	var enqueued atomic.Int64
	go func() {
		if err := enqueueAll(ctx, replicas[0].Client(), tasks, &enqueued); err != nil {
			failed <- err
		}
	}()
	if err := waitDrained(ctx, srv.broker, cfg.updates, start, &enqueued, failed, out); err != nil {
		return result{}, err
	}
	took := time.Since(start)
	fmt.Fprintf(out, "  SKU-HOT: %d adjustments, the last one done at %v\n", hotDone.n.Load(), hotDone.last().Sub(start).Round(time.Millisecond))
	return report(ctx, store, skus, expected, cfg, mode, took, out)
}

// seedStock names n SKUs, the first one hot, and sets each one's stock.
func seedStock(ctx context.Context, store *redis.Client, n int) ([]string, error) {
	skus := make([]string, n)
	for i := range skus {
		skus[i] = fmt.Sprintf("SKU-%03d", i)
	}
	skus[0] = "SKU-HOT"
	for _, s := range skus {
		if err := store.Set(ctx, "stock:"+s, initialStock, 0).Err(); err != nil {
			return nil, fmt.Errorf("inventory store: %w", err)
		}
	}
	return skus, nil
}

// startReplicas starts the replicas, each a worker with its own lock client
// and asynq server; one that stops on its own reports to failed. The
// returned stop (never nil) shuts them all down and waits for them.
func startReplicas(ctx context.Context, cfg config, srv *servers, store *redis.Client, hotDone *hotTally, failed chan<- error) ([]*worker.Worker, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	var replicas []*worker.Worker
	finished := make(chan error, cfg.replicas)
	stop := func() {
		cancel()
		for range replicas {
			<-finished
		}
	}
	for r := range cfg.replicas {
		w, err := newReplica(cfg, srv, store, hotDone)
		if err != nil {
			return nil, stop, err
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
	return replicas, stop, nil
}

// adjustments draws the demo's tasks and the stock change of each SKU.
func adjustments(cfg config, skus []string) ([]*asynq.Task, map[string]int64) {
	rng := rand.New(rand.NewPCG(42, 7))
	expected := map[string]int64{}
	tasks := make([]*asynq.Task, cfg.updates)
	for i := range tasks {
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
		tasks[i] = asynq.NewTask("stock:adjust", b)
	}
	return tasks, expected
}

// enqueueAll submits the tasks from a few goroutines at once, in about the
// order given: one at a time, the round trips would make enqueueing the
// slowest part of the demo.
func enqueueAll(ctx context.Context, enq *asynq.Client, tasks []*asynq.Task, enqueued *atomic.Int64) error {
	const senders = 8
	var next atomic.Int64
	errs := make(chan error, senders)
	for range senders {
		go func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tasks) {
					errs <- nil
					return
				}
				if _, err := enq.EnqueueContext(ctx, tasks[i]); err != nil {
					errs <- fmt.Errorf("enqueue: %w", err)
					return
				}
				enqueued.Add(1)
			}
		}()
	}
	var err error
	for range senders {
		err = errors.Join(err, <-errs)
	}
	return err
}

// hotTally tracks the hot SKU's completed adjustments.
type hotTally struct {
	n      atomic.Int64
	lastNs atomic.Int64
}

func (h *hotTally) add() {
	h.n.Add(1)
	h.lastNs.Store(time.Now().UnixNano())
}

func (h *hotTally) last() time.Time { return time.Unix(0, h.lastNs.Load()) }

// newReplica builds one worker replica of the demo.
func newReplica(cfg config, srv *servers, store *redis.Client, hotDone *hotTally) (*worker.Worker, error) {
	vars := map[string]string{
		"ASYNQ_REDIS_URL":         srv.broker,
		"REDLOCK_NODES":           strings.Join(srv.nodes, ","),
		"REDLOCK_TTL":             "10s",
		"WORKER_CONCURRENCY":      fmt.Sprint(cfg.concurrency),
		"WORKER_SHUTDOWN_TIMEOUT": "5s",
		"METRICS_ADDR":            "",
	}
	if srv.embeddedNodes {
		// The default 50ms suits redis-server nodes. Embedded ones run in
		// this process, beside the broker, the store and 3 replicas, and
		// run their Lua scripts in Go: on a loaded machine a call waits
		// for CPU longer than 50ms (seconds on a heavily loaded one), the
		// release "fails" and the node looks down although nothing is
		// wrong. In-process nodes cannot fail on their own, so their
		// timeout can be the largest the worker accepts, a third of the
		// TTL (10s, the time a lost lock would hold its SKU up).
		vars["REDLOCK_NODE_TIMEOUT"] = embeddedNodeTimeout.String()
		// A readiness probe pings the nodes, then the broker, within one
		// bound of max(interval, 1s, node timeout): slow nodes would leave
		// the (embedded, equally starved) broker's ping no time, and the
		// broker would be reported unreachable. Probing every 3 node
		// timeouts gives the broker two of them; a demo needs no faster
		// readiness.
		vars["WORKER_READINESS_INTERVAL"] = (3 * embeddedNodeTimeout).String()
	}
	wcfg, err := worker.LoadConfigFrom(withEnviron(vars, environ()))
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
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		var a adjustment
		if err := json.Unmarshal(t.Payload(), &a); err != nil {
			return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
		}
		// The task's stable key: the same for every delivery and for a
		// copy parked under another ID.
		key, _ := middleware.TaskKeyFromContext(ctx)
		if err := adjust(ctx, store, key, a, cfg.work); err != nil {
			return err
		}
		if a.SKU == "SKU-HOT" {
			hotDone.add()
		}
		return nil
	}), key)
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// waitDrained shows progress until n tasks were processed and the queue is
// empty.
func waitDrained(ctx context.Context, broker string, n int, start time.Time, enqueued *atomic.Int64, failed <-chan error, out io.Writer) error {
	opt, err := asynq.ParseRedisURI(broker)
	if err != nil {
		return err
	}
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(5 * time.Minute)
	var shown time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-tick.C:
		}
		// The queue exists once a task was enqueued into it; before that
		// asynq answers with an internal not-found error.
		qi, err := &asynq.QueueInfo{}, error(nil)
		if enqueued.Load() > 0 {
			qi, err = insp.GetQueueInfo("default")
		}
		if err != nil {
			return fmt.Errorf("broker: %w", err)
		}
		drained := enqueued.Load() == int64(n) && qi.Processed >= n && qi.Pending+qi.Active+qi.Retry+qi.Scheduled == 0
		if drained || time.Since(shown) >= 500*time.Millisecond {
			shown = time.Now()
			fmt.Fprintf(out, "  %5d enqueued, %5d / %d done, %d queued or running, %d parked or retrying (%v)\n",
				enqueued.Load(), qi.Processed, n, qi.Pending+qi.Active, qi.Retry+qi.Scheduled, time.Since(start).Round(10*time.Millisecond))
		}
		if drained {
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

// report prints expected vs actual stock per SKU. A lost update loses an
// adjustment whatever its sign, so without locks some SKUs end above their
// expected stock (a lost decrement) and others below (a lost increment); the
// table says so rather than leave a "gain" unexplained.
func report(ctx context.Context, store *redis.Client, skus []string, expected map[string]int64, cfg config, mode string, took time.Duration, out io.Writer) (result, error) {
	var res result
	var above, below int
	fmt.Fprintf(out, "\n%-8s %9s %9s %6s\n", "SKU", "expected", "actual", "diff")
	for _, s := range skus {
		got, err := store.Get(ctx, "stock:"+s).Int64()
		if err != nil {
			return res, fmt.Errorf("inventory store: %w", err)
		}
		want := initialStock + expected[s]
		diff := got - want
		shown, note := "0", ""
		switch {
		case diff > 0:
			above++
			shown, note = fmt.Sprintf("%+d", diff), "  more decrements lost than increments"
		case diff < 0:
			below++
			shown, note = fmt.Sprintf("%+d", diff), "  more increments lost than decrements"
		}
		if diff != 0 {
			res.skusOff++
		}
		res.lost += max(diff, -diff)
		fmt.Fprintf(out, "%-8s %9d %9d %6s%s\n", s, want, got, shown, note)
	}
	if res.skusOff > 0 && cfg.noLock {
		fmt.Fprintf(out, "\nEach adjustment reads the stock, works, then writes stock+delta. Without a lock two tasks of one\n"+
			"SKU can read the same stock: the later write overwrites the earlier one, whose adjustment is lost\n"+
			"whatever its sign. A SKU whose lost adjustments were mostly decrements (sales) ends above its\n"+
			"expected stock (%d SKUs here), one that lost mostly increments (deliveries) below it (%d SKUs):\n"+
			"nothing was gained: each SKU is off by the adjustments it lost.\n", above, below)
	}
	fmt.Fprintf(out, "\n%d adjustments in %v %s: %d SKUs wrong, %d stock units lost\n",
		cfg.updates, took.Round(time.Millisecond), mode, res.skusOff, res.lost)
	return res, nil
}

// adjust applies one adjustment as a read-modify-write: correct only if
// nobody else touches the SKU meanwhile (the lock's job). The lock's
// completion record keeps asynq from running a finished task again; what it
// cannot cover (a worker killed between the handler's return and the
// release) the store covers: the write applies only if the task's key was
// not applied yet, checked and marked in the same script (applyOnce). The
// marks are fields of one hash per SKU rather than a key per task: the
// embedded store pays for every key on every command (miniredis runs its
// real-time expiry over all keys), and on a real store a SKU's marks expire
// an hour after its last adjustment.
func adjust(ctx context.Context, store *redis.Client, taskKey string, a adjustment, work time.Duration) error {
	marks := "applied:" + a.SKU
	if done, err := store.HExists(ctx, marks, taskKey).Result(); err != nil || done {
		return err
	}
	stock, err := store.Get(ctx, "stock:"+a.SKU).Int64()
	if err != nil {
		return err
	}
	time.Sleep(work)
	return applyOnce.Run(ctx, store, []string{"stock:" + a.SKU, marks}, stock+a.Delta, taskKey, 3600).Err()
}

// applyOnce writes a SKU's new stock and marks the task applied, unless its
// mark is there already: KEYS stock, marks; ARGV new stock, task key, marks'
// TTL in seconds.
var applyOnce = redis.NewScript(`
if redis.call('HSETNX', KEYS[2], ARGV[2], 1) == 0 then
	return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1`)
