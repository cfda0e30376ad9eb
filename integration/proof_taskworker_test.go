package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// The task worker of TestProofWorkerCrash: the test binary re-executed as
// what a deployment runs, a worker.Worker built by worker.New from
// environment-style variables, against the test's broker and lock nodes,
// with one handler that applies inventory adjustments idempotently.
//
// It speaks the protocol of the other proof workers (see
// proof_worker_test.go): its workerConfig as JSON in proofWorkerEnv, words
// on stdin ("go" starts the asynq server, "stop" shuts it down gracefully;
// end of file makes it exit at once), one workerEvent a line on stdout, and
// cfg.Out written before a clean exit. TestMain runs taskWorkerMain instead
// of proofWorkerMain when the config's Mode is modeTasks. The config's fields
// mean here:
//
//   - Store: the redis-server that is both asynq's broker (ASYNQ_REDIS_URL)
//     and the inventory store;
//   - KeyPrefix: prefix of the inventory keys on the store;
//   - Nodes, TTL, NodeTimeout: REDLOCK_NODES, REDLOCK_TTL,
//     REDLOCK_NODE_TIMEOUT; Fencing: middleware.WithLockOptions(redlock.WithFencing());
//   - Goroutines: WORKER_CONCURRENCY;
//   - Hold: range of the handler's two pauses inside its critical section,
//     one between reading the stock and committing, one after committing;
//   - Limit: hard bound on the process's life.
//
// Events: "ready"; per run of a task under its lock, "section" (Value "id
// sku read": the stock read; Fence: the lock's), then "applied" (Value "id
// sku wrote") once the commit returned, then "done" (Value "id") just before
// the handler returns and the lock is released; "dedup" (Value "id") for a
// run that found the task applied already; "abort" (Value "id", Err) for a
// run that stopped before committing.

// modeTasks is the worker mode of the asynq task workers.
const modeTasks = "tasks"

// taskType is the asynq task type of inventory adjustments.
const taskType = "stock:adjust"

// Inventory keys on the store, after the config's KeyPrefix.
const (
	stockKey   = "stock:"   // + SKU: the stock, an integer
	appliedKey = "applied:" // + task ID: "worker-id stock-written", set by the commit that applied the task
	runsKey    = "runs:"    // + task ID: how many runs of the task reached the handler
	logKey     = "log"      // list of the task IDs applied, one entry per commit
)

// taskWorker is the state of a task worker process.
type taskWorker struct {
	*proofWorker // config, stdin and stdout
	store        *redis.Client
}

// taskWorkerMain runs a task worker from its JSON config and returns the
// exit status.
func taskWorkerMain(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "task worker: bad config: %v\n", err)
		return 2
	}
	if cfg.Limit > 0 {
		time.AfterFunc(cfg.Limit, func() {
			fmt.Fprintf(os.Stderr, "task worker %s: still running after %v: giving up\n", cfg.ID, cfg.Limit)
			os.Exit(3)
		})
	}
	tw := &taskWorker{proofWorker: &proofWorker{cfg: cfg, cmds: make(chan string, 4)}}
	go tw.readStdin()
	if err := tw.run(); err != nil {
		fmt.Fprintf(os.Stderr, "task worker %s: %v\n", cfg.ID, err)
		return 1
	}
	return 0
}

func (tw *taskWorker) run() error {
	cfg := tw.cfg
	wcfg, err := worker.LoadConfigFrom(map[string]string{
		"ASYNQ_REDIS_URL":                    "redis://" + cfg.Store,
		"REDLOCK_NODES":                      strings.Join(cfg.Nodes, ","),
		"REDLOCK_TTL":                        cfg.TTL.String(),
		"REDLOCK_NODE_TIMEOUT":               cfg.NodeTimeout.String(),
		"WORKER_CONCURRENCY":                 strconv.Itoa(cfg.Goroutines),
		"WORKER_SHUTDOWN_TIMEOUT":            "5s",
		"WORKER_TASK_CHECK_INTERVAL":         "50ms",
		"WORKER_DELAYED_TASK_CHECK_INTERVAL": "100ms",
		// Not "": LoadConfigFrom turns an empty METRICS_ADDR into its
		// default, :9090, which the three workers of a run would share.
		"METRICS_ADDR": "127.0.0.1:0",
		"LOG_LEVEL":    "warn",
	})
	if err != nil {
		return err
	}
	var mwOpts []middleware.Option
	if cfg.Fencing {
		mwOpts = append(mwOpts, middleware.WithLockOptions(redlock.WithFencing()))
	}
	w, err := worker.New(wcfg, worker.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Handle(taskType, asynq.HandlerFunc(tw.adjust), middleware.ByField("sku"), mwOpts...); err != nil {
		return err
	}
	o := redistest.ClientOptions(cfg.Store)
	o.ReadTimeout, o.WriteTimeout, o.DialTimeout = 3*time.Second, 3*time.Second, time.Second
	tw.store = redis.NewClient(o)
	defer tw.store.Close()
	if err := tw.store.Ping(context.Background()).Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}

	tw.emit(workerEvent{Event: "ready"})
	tw.await("go")
	stop := make(chan struct{})
	go func() { tw.await("stop"); close(stop) }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		return fmt.Errorf("worker stopped before being told to: %v", err)
	case <-stop:
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	b, err := json.Marshal(workerOutput{ID: cfg.ID})
	if err != nil {
		return err
	}
	return os.WriteFile(cfg.Out, b, 0o644)
}

// adjust applies one adjustment, at most once per task ID however often the
// task is delivered: under the task's lock it checks the task's "applied"
// marker, reads the stock, and writes the new stock, the marker and a log
// entry in one MULTI/EXEC, so that no kill can leave the stock updated
// without the marker (or the reverse). A run that finds the marker returns
// at once: an earlier run committed and was killed before asynq heard of it.
func (tw *taskWorker) adjust(ctx context.Context, t *asynq.Task) error {
	start := stamp()
	id, _ := asynq.GetTaskID(ctx)
	lock, ok := middleware.LockFromContext(ctx)
	if !ok {
		return fmt.Errorf("task %s ran without its lock", id)
	}
	var a adjustment
	if err := json.Unmarshal(t.Payload(), &a); err != nil {
		return fmt.Errorf("task %s: %v: %w", id, err, asynq.SkipRetry)
	}
	k := tw.cfg.KeyPrefix
	stock, marker := k+stockKey+a.SKU, k+appliedKey+id
	if err := tw.store.Incr(ctx, k+runsKey+id).Err(); err != nil {
		return err
	}
	n, err := tw.store.Exists(ctx, marker).Result()
	if err != nil {
		return err
	}
	if n > 0 {
		tw.emit(workerEvent{Event: "dedup", At: start, Value: id})
		return nil
	}
	read, err := tw.store.Get(ctx, stock).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	tw.emit(workerEvent{Event: "section", At: start, Value: id + " " + a.SKU + " " + read, Fence: lock.Fence})
	if err := tw.pause(ctx); err != nil {
		tw.emit(workerEvent{Event: "abort", Value: id, Err: err.Error()})
		return err // nothing written: the retry starts afresh
	}
	var cur int64
	if read != "" {
		if cur, err = strconv.ParseInt(read, 10, 64); err != nil {
			return fmt.Errorf("stock %s holds %q: %w", a.SKU, read, asynq.SkipRetry)
		}
	}
	v := strconv.FormatInt(cur+a.Delta, 10)
	if _, err := tw.store.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, stock, v, 0)
		p.Set(ctx, marker, tw.cfg.ID+" "+v, 0)
		p.RPush(ctx, k+logKey, id)
		return nil
	}); err != nil {
		return err // committed or not, the marker makes the retry right
	}
	tw.emit(workerEvent{Event: "applied", Value: id + " " + a.SKU + " " + v})
	_ = tw.pause(ctx) // applied, not yet acknowledged: a kill here leaves the marker to the next run
	tw.emit(workerEvent{Event: "done", Value: id})
	return nil
}

// pause waits a duration drawn from Hold, or until ctx ends (the lock was
// lost, or the worker is shutting down) and then returns its cause.
func (tw *taskWorker) pause(ctx context.Context) error {
	h := tw.cfg.Hold
	d := h[0] + time.Duration(rand.Int64N(int64(h[1]-h[0])+1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
