package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// The once worker of once_worker_test.go: the test binary re-executed as an
// asynq server whose tasks run under middleware.Lock, on the test's broker
// and lock nodes. It can hold asynq's acknowledgment of a completed task:
// an asynq middleware outside the lock's (ServeMux.Use) waits, once the
// task's handler returned nil, until the lock client reported the release
// (the round that writes the completion record) and then announces
// "returned" and does not return (so asynq does not acknowledge) until the
// parent says "ack" or the task's context ends. The parent kills or pauses
// the process meanwhile: a worker that stops after its handler returned,
// before asynq heard of it.
//
// It speaks the protocol of the other proof workers (proof_worker_test.go):
// its workerConfig as JSON in proofWorkerEnv, words on stdin ("go" starts
// the server, "ack" lets the held acknowledgments go, "stop" shuts the
// server down gracefully; end of file makes it exit at once), one
// workerEvent a line on stdout. The config's fields mean here:
//
//   - Store: the redis-server that is both asynq's broker and the store of
//     the handler's effect, under KeyPrefix;
//   - Nodes, TTL, NodeTimeout: the lock client and the middleware's TTL;
//   - Goroutines: asynq's concurrency; Queue: the one queue served;
//   - Records: completion records on (the default window) or off (0);
//   - HoldAck: hold asynq's acknowledgments as above;
//   - Limit: hard bound on the process's life.
//
// Events: "ready"; "ran" (Value: task ID) when the handler applied its
// effect; "returned" (Value: task ID) when an acknowledgment is held;
// "skipped" (Value: task ID) when the middleware skipped a re-delivery.

// modeOnce is the worker mode of the once workers.
const modeOnce = "once"

// onceType is the asynq task type the once workers serve.
const onceType = "once:apply"

// Keys of the once workers' store, after the config's KeyPrefix, by task ID.
const (
	onceRunsKey    = "runs:"    // handler calls
	onceAppliedKey = "applied:" // effects applied: a second one is a task run twice
)

// onceTask is the payload of a once task: the resource, and whether its
// handler fails its first run (asynq retries it).
type onceTask struct {
	SKU       string `json:"sku"`
	FailFirst bool   `json:"failFirst,omitempty"`
}

// errFirstRun is the failure of a FailFirst task's first run.
var errFirstRun = errors.New("first run fails on purpose")

// workerMode returns the Mode of a worker config.
func workerMode(raw string) string {
	var c struct {
		Mode string `json:"mode"`
	}
	_ = json.Unmarshal([]byte(raw), &c)
	return c.Mode
}

// onceWorker is the state of a once worker process.
type onceWorker struct {
	*proofWorker
	store *redis.Client
	acks  chan struct{} // closed on "ack"

	locks *redlock.Client

	mu  sync.Mutex
	ran map[string]middleware.LockInfo // task ID -> the lock it ran under
}

// onceWorkerMain runs a once worker from its JSON config and returns the
// exit status.
func onceWorkerMain(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "once worker: bad config: %v\n", err)
		return 2
	}
	if cfg.Limit > 0 {
		time.AfterFunc(cfg.Limit, func() {
			fmt.Fprintf(os.Stderr, "once worker %s: still running after %v: giving up\n", cfg.ID, cfg.Limit)
			os.Exit(3)
		})
	}
	ow := &onceWorker{proofWorker: &proofWorker{cfg: cfg, cmds: make(chan string, 4)}, acks: make(chan struct{}),
		ran: map[string]middleware.LockInfo{}}
	go ow.readStdin()
	if err := ow.run(); err != nil {
		fmt.Fprintf(os.Stderr, "once worker %s: %v\n", cfg.ID, err)
		return 1
	}
	return 0
}

func (ow *onceWorker) run() error {
	cfg := ow.cfg
	locks, err := redlock.NewFromURLs(cfg.Nodes, redlock.WithNodeTimeout(cfg.NodeTimeout))
	if err != nil {
		return err
	}
	defer locks.Close()
	ow.locks = locks
	ow.store = redis.NewClient(redistest.ClientOptions(cfg.Store))
	defer ow.store.Close()
	if err := ow.store.Ping(context.Background()).Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	window := time.Duration(0)
	if cfg.Records {
		window = time.Hour // the middleware's default
	}
	mw, err := middleware.New(locks, middleware.ByField("sku"), middleware.WithTTL(cfg.TTL),
		middleware.WithCompletionWindow(window), middleware.WithObserver(ow.observeTask))
	if err != nil {
		return err
	}
	mux := asynq.NewServeMux()
	if cfg.HoldAck {
		mux.Use(ow.holdAck)
	}
	mux.Handle(onceType, mw(asynq.HandlerFunc(ow.apply)))
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: cfg.Store}, asynq.Config{
		Concurrency: cfg.Goroutines, Queues: map[string]int{cfg.Queue: 1},
		IsFailure: middleware.IsFailure, RetryDelayFunc: onceRetryDelay,
		TaskCheckInterval: 50 * time.Millisecond, DelayedTaskCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, Logger: quietAsynq{}, LogLevel: asynq.FatalLevel,
	})

	ow.emit(workerEvent{Event: "ready"})
	ow.await("go")
	if err := srv.Start(mux); err != nil {
		return err
	}
	ow.serveWords()
	srv.Shutdown() // waits for the handlers: asynq has decided on every task when it returns
	return nil
}

// serveWords handles the parent's words after "go" until "stop".
func (ow *onceWorker) serveWords() {
	for c := range ow.cmds {
		switch c {
		case "ack":
			select {
			case <-ow.acks:
			default:
				close(ow.acks)
			}
		case "stop":
			return
		}
	}
}

// onceRetryDelay is middleware.RetryDelay, except that a handler's own
// failure comes back in 100ms instead of after asynq's backoff (15s and
// more), which would prove nothing here.
func onceRetryDelay(n int, err error, t *asynq.Task) time.Duration {
	if middleware.IsFailure(err) && !errors.Is(err, asynq.ErrLeaseExpired) {
		return 100 * time.Millisecond
	}
	return middleware.RetryDelay(n, err, t)
}

// apply is the handler: it counts its call, fails a FailFirst task's first
// call, and otherwise applies the task's effect (not idempotent on
// purpose: a second run shows).
func (ow *onceWorker) apply(ctx context.Context, t *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	li, ok := middleware.LockFromContext(ctx)
	if !ok {
		return fmt.Errorf("task %s ran without its lock", id)
	}
	var p onceTask
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("task %s: %v: %w", id, err, asynq.SkipRetry)
	}
	k := ow.cfg.KeyPrefix
	n, err := ow.store.Incr(ctx, k+onceRunsKey+id).Result()
	if err != nil {
		return err
	}
	if p.FailFirst && n == 1 {
		return errFirstRun
	}
	if err := ow.store.Incr(ctx, k+onceAppliedKey+id).Err(); err != nil {
		return err
	}
	ow.mu.Lock()
	ow.ran[id] = li
	ow.mu.Unlock()
	ow.emit(workerEvent{Event: "ran", Value: id})
	return nil
}

// holdAck is the asynq middleware of HoldAck (see the top of the file).
func (ow *onceWorker) holdAck(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if err := next.ProcessTask(ctx, t); err != nil {
			return err
		}
		id, _ := asynq.GetTaskID(ctx)
		ow.mu.Lock()
		li, ran := ow.ran[id]
		ow.mu.Unlock()
		if !ran {
			return nil // not run here (skipped): nothing to hold
		}
		if !ow.released(li, 30*time.Second) {
			fmt.Fprintf(os.Stderr, "once worker %s: task %s: no release of %s seen in 30s\n", ow.cfg.ID, id, li.Resource)
			os.Exit(5)
		}
		ow.emit(workerEvent{Event: "returned", Value: id})
		select {
		case <-ow.acks:
		case <-ctx.Done():
		}
		return nil
	})
}

// released waits, at most d, until a quorum of the lock nodes answers
// without li's token: its release ran there, and with it the record, if
// any (the release script writes both).
func (ow *onceWorker) released(li middleware.LockInfo, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		states, err := ow.locks.Inspect(ctx, li.Resource)
		gone := 0
		for _, s := range states {
			if s.Err == nil && s.Token != li.Token {
				gone++
			}
		}
		if err == nil && gone >= len(states)/2+1 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// observeTask announces the re-deliveries the middleware skipped.
func (ow *onceWorker) observeTask(e middleware.Event) {
	if e.Kind == "redelivery_skipped" {
		ow.emit(workerEvent{Event: "skipped", Value: e.TaskID})
	}
}
