package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/workertest"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

type fixture struct {
	nodes  *redistest.Cluster
	broker *redistest.Node
	cfg    Config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{nodes: redistest.StartCluster(t, 5), broker: redistest.StartNode(t)}
	cfg, err := LoadConfigFrom(map[string]string{
		"ASYNQ_REDIS_URL":         f.broker.URL(),
		"REDLOCK_NODES":           strings.Join(f.nodes.URLs(), ","),
		"REDLOCK_TTL":             "2s",
		"REDLOCK_NODE_TIMEOUT":    "100ms",
		"WORKER_CONCURRENCY":      "4",
		"WORKER_SHUTDOWN_TIMEOUT": "1s",
		"METRICS_ADDR":            "127.0.0.1:0",
		"LOG_LEVEL":               "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	return f
}

// start runs w until the test ends (or stop is called) and waits until its
// HTTP endpoint listens.
func start(t *testing.T, w *Worker) (stop func() error) { return workertest.Run(t, w) }

func get(t *testing.T, w *Worker, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + w.Addr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls path until it answers code (bounded).
func waitStatus(t *testing.T, w *Worker, path string, code int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got, _ := get(t, w, path)
		if got == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s answered %d for %v, want %d", path, got, limit, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func quiet() Option { return WithLogger(slog.New(slog.DiscardHandler)) }

// TestWorkerProcessesLockedTasksAndServesMetrics: a worker on real nodes
// runs locked tasks, reports lock metrics and is ready.
func TestWorkerProcessesLockedTasksAndServesMetrics(t *testing.T) {
	f := newFixture(t)
	f.cfg.ReadinessInterval = 100 * time.Millisecond
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	resources := map[string]bool{}
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		li, ok := middleware.LockFromContext(ctx)
		if !ok {
			return errors.New("no lock")
		}
		mu.Lock()
		resources[li.Resource] = true
		mu.Unlock()
		return nil
	}), middleware.ByField("sku"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	for i := range 20 {
		b, _ := json.Marshal(map[string]any{"sku": []string{"A", "B", "C"}[i%3]})
		if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", b)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: f.broker.Addr()})
	defer insp.Close()
	for {
		qi, err := insp.GetQueueInfo("default")
		if err == nil && qi.Processed >= 20 && qi.Pending+qi.Active+qi.Retry+qi.Scheduled == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks not processed: %+v %v", qi, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(resources) != 3 {
		t.Fatalf("locked resources %v", resources)
	}
	waitStatus(t, w, "/readyz", 200, 10*time.Second)
	if code, _ := get(t, w, "/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	_, body := get(t, w, "/metrics")
	for _, m := range []string{`asynqlock_lock_acquire_seconds_count{outcome="acquired"}`, "asynqlock_lock_quorum_up 1", "asynqlock_worker_ready 1", "asynq_tasks_processed_total"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestReadinessFollowsLockQuorum: killing a majority of lock nodes makes
// /readyz fail; bringing them back makes it pass again.
func TestReadinessFollowsLockQuorum(t *testing.T) {
	f := newFixture(t)
	f.cfg.ReadinessInterval = 100 * time.Millisecond
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	waitStatus(t, w, "/readyz", 200, 10*time.Second)
	for _, n := range f.nodes.Nodes[:3] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, w, "/readyz", 503, 10*time.Second)
	if _, body := get(t, w, "/metrics"); !strings.Contains(body, "asynqlock_lock_quorum_up 0") {
		t.Fatal("quorum gauge not 0")
	}
	if code, _ := get(t, w, "/healthz"); code != 200 {
		t.Fatal("/healthz failed while only the quorum was lost")
	}
	for _, n := range f.nodes.Nodes[:3] {
		if err := n.Restart(0); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, w, "/readyz", 200, 10*time.Second)
}

// TestGracefulShutdownReleasesLocks: cancelling Run while a locked task runs
// cancels the task, releases its lock and puts the task back in the queue.
func TestGracefulShutdownReleasesLocks(t *testing.T) {
	f := newFixture(t)
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	err = w.Handle("report:build", asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		started <- struct{}{}
		<-ctx.Done()
		time.Sleep(200 * time.Millisecond) // cleanup after asynq stopped waiting
		return ctx.Err()
	}), middleware.ByType())
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, w)
	if _, err := w.Client().Enqueue(asynq.NewTask("report:build", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("task never started")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Run returned: the handler has returned and released its lock.
	probe := redistest.Client(t, f.nodes.Nodes[0].Addr())
	keys, err := probe.Keys(context.Background(), "asynqlock:{task:report:build:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, ":fence") {
			t.Fatalf("lock key %s left after shutdown", k)
		}
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: f.broker.Addr()})
	defer insp.Close()
	qi, err := insp.GetQueueInfo("default")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Archived != 0 || qi.Pending+qi.Retry+qi.Scheduled+qi.Active != 1 {
		t.Fatalf("queue after shutdown %+v: the task must be back in the queue", qi)
	}
}

// offline is a worker of goodEnv's configuration, never run (its servers
// do not exist), closed when the test ends.
func offline(t *testing.T) *Worker {
	t.Helper()
	cfg, err := LoadConfigFrom(goodEnv())
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func TestNewRejectsBadConfigAndHandlers(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("empty config: %v", err)
	}
	w := offline(t)
	if err := w.Handle("", nil, nil); err == nil {
		t.Fatal("empty Handle accepted")
	}
	if err := w.Handle("x", asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }), middleware.ByType(), middleware.WithTTL(-1)); err == nil {
		t.Fatal("bad middleware option accepted")
	}
	noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	if err := w.Handle("import", noop, middleware.ByField("tenant"), middleware.WithLimit(0)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("limit 0 accepted by Handle: %v", err)
	}
	if err := w.Handle("import", noop, middleware.ByField("tenant"), middleware.WithLimit(3)); err != nil {
		t.Fatalf("Handle with WithLimit(3): %v", err)
	}
	// WORKER_LIMITS's limit reaches the type's handlers (a bad one, which
	// LoadConfig refuses, shows it), and Handle's own option wins.
	w.cfg.Limits = map[string]int{"export": 0}
	if err := w.Handle("export", noop, middleware.ByField("tenant")); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("WORKER_LIMITS export=0 did not reach Handle: %v", err)
	}
	if err := w.Handle("export", noop, middleware.ByField("tenant"), middleware.WithLimit(2)); err != nil {
		t.Fatalf("Handle's WithLimit(2) beside WORKER_LIMITS: %v", err)
	}
}
