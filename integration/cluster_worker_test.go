package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
)

// clusterTally counts a worker's tasks: deliveries (each time the
// middleware derives a task's key: once, plus once per trip back through
// asynq) and runs per task ID, and whether two of one SKU ever overlapped.
type clusterTally struct {
	mu         sync.Mutex
	delivered  map[string]int
	ran        map[string]int
	running    map[string]int
	overlap    []string
	done       chan struct{}
	want, runs int
}

func newClusterTally(want int) *clusterTally {
	return &clusterTally{delivered: map[string]int{}, ran: map[string]int{}, running: map[string]int{}, done: make(chan struct{}), want: want}
}

// key is the worker's KeyFunc: by the sku field, counting deliveries.
func (c *clusterTally) key(ctx context.Context, tk *asynq.Task) (string, error) {
	id, _ := asynq.GetTaskID(ctx)
	c.mu.Lock()
	c.delivered[id]++
	c.mu.Unlock()
	return middleware.ByField("sku")(ctx, tk)
}

// ProcessTask runs a task for 20ms, long enough for a second holder to show
// and for tasks of a hot SKU to meet it busy.
func (c *clusterTally) ProcessTask(ctx context.Context, tk *asynq.Task) error {
	var p struct{ SKU string }
	if err := json.Unmarshal(tk.Payload(), &p); err != nil {
		return err
	}
	id, _ := asynq.GetTaskID(ctx)
	c.mu.Lock()
	if c.running[p.SKU]++; c.running[p.SKU] > 1 {
		c.overlap = append(c.overlap, p.SKU)
	}
	c.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[p.SKU]--
	c.ran[id]++
	if c.runs++; c.runs == c.want {
		close(c.done)
	}
	return nil
}

// trips sums the deliveries past the first of every task, and lists the
// tasks that did not run exactly once.
func (c *clusterTally) trips() (trips int, notOnce map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	notOnce = map[string]int{}
	for id, n := range c.delivered {
		trips += n - 1
		if c.ran[id] != 1 {
			notOnce[id] = c.ran[id]
		}
	}
	return trips, notOnce
}

// TestClusterWorkerFromEnv: a worker configured only by its variables, with
// three cluster lock nodes of three shards and a three-shard cluster broker,
// runs 40 tasks of a hot SKU and cold ones (names with braces among them)
// exactly once each, one at a time per SKU, nothing archived. The hot SKU
// parks tasks and promotes them, and the metrics account for every trip a
// task made back through asynq: parks plus requeues equal the deliveries
// past each task's first. The control runs one completed task again: the
// tally sees it run twice. The /locks page then lists locks on every shard.
func TestClusterWorkerFromEnv(t *testing.T) {
	urls, addrs := redistest.StartLockClusters(t, 3, 3)
	broker := redistest.StartRedisCluster(t, 3)
	w := newWorker(t, map[string]string{
		"ASYNQ_REDIS_URL":            "redis-cluster://" + strings.Join(broker, ","),
		"REDLOCK_NODES":              strings.Join(urls, ","),
		"REDLOCK_NODE_TIMEOUT":       "1s",
		"WORKER_CONCURRENCY":         "8",
		"WORKER_SHUTDOWN_TIMEOUT":    "2s",
		"WORKER_TASK_CHECK_INTERVAL": "50ms",
		// Records off: the control runs a completed task again, which its
		// completion record would skip (TestOnceAcrossABrokerOutage).
		"WORKER_COMPLETION_WINDOW": "0",
		"METRICS_ADDR":             "127.0.0.1:0",
		"LOG_LEVEL":                "error",
	})
	skus := []string{"}x", "a}:fence", "{", "cold-1", "cold-2", "cold-3"}
	for range 40 {
		skus = append(skus, "hot")
	}
	tally := newClusterTally(len(skus))
	if err := w.Handle("cluster:sku", tally, tally.key); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	for i, sku := range skus {
		payload, _ := json.Marshal(map[string]any{"sku": sku, "n": i})
		if _, err := w.Client().Enqueue(asynq.NewTask("cluster:sku", payload), asynq.Retention(time.Hour)); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	select {
	case <-tally.done:
	case <-time.After(120 * time.Second):
		t.Fatalf("ran %d of %d tasks within 120s", tally.runs, tally.want)
	}
	insp := asynq.NewInspector(asynq.RedisClusterClientOpt{Addrs: broker})
	t.Cleanup(func() { _ = insp.Close() })
	if qi := waitQueueEmpty(t, insp, time.Minute); qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	clusterAccounting(t, w, tally)
	clusterRunAgainControl(t, insp, tally)
	locksPageShowsEveryShard(t, w.Addr(), urls, addrs)
}

// clusterAccounting checks that every task ran once and no two of a SKU
// overlapped, and that the worker's metrics count every trip back through
// asynq: parks and requeues, nothing skipped, failed or resubmitted, and
// promotions among the parked tasks.
func clusterAccounting(t *testing.T, w *worker.Worker, tally *clusterTally) {
	t.Helper()
	trips, notOnce := tally.trips()
	tally.mu.Lock()
	overlap, delivered := tally.overlap, len(tally.delivered)
	tally.mu.Unlock()
	if len(overlap) > 0 || len(notOnce) > 0 || delivered != tally.want {
		t.Fatalf("overlaps %q; tasks not run once %v; %d tasks delivered, want %d", overlap, notOnce, delivered, tally.want)
	}
	conflicts := func(action string) int {
		return int(counter(t, w, "asynqlock_task_conflicts_total", map[string]string{"action": action}))
	}
	parks, requeues := conflicts("park"), conflicts("requeue")
	other := int(counter(t, w, "asynqlock_task_conflicts_total", nil)) - parks - requeues
	promotions := int(counter(t, w, "asynqlock_task_promotions_total", nil))
	t.Logf("trips back through asynq %d: parks %d, requeues %d; promotions %d", trips, parks, requeues, promotions)
	if trips != parks+requeues || other != 0 {
		t.Fatalf("%d trips back through asynq, metrics count %d parks + %d requeues (and %d other conflicts)", trips, parks, requeues, other)
	}
	if parks == 0 || promotions == 0 || promotions > parks {
		t.Fatalf("parks %d, promotions %d: want parking and promotion exercised, promotions among the parked", parks, promotions)
	}
}

// clusterRunAgainControl runs one completed (retained) task again: the
// tally must see it run twice, showing the exactly-once check can fail.
func clusterRunAgainControl(t *testing.T, insp *asynq.Inspector, tally *clusterTally) {
	t.Helper()
	done, err := insp.ListCompletedTasks("default", asynq.PageSize(1))
	if err != nil || len(done) != 1 {
		t.Fatalf("completed tasks: %v, %d", err, len(done))
	}
	id := done[0].ID
	if err := insp.RunTask("default", id); err != nil {
		t.Fatal(err)
	}
	twice := waitUntil(time.Minute, func() bool {
		_, notOnce := tally.trips()
		return notOnce[id] == 2
	})
	if !twice {
		t.Fatalf("control: task %s run again did not show as run twice", id)
	}
}

// locksPageShowsEveryShard: the worker's /locks page lists locks held on
// every shard of every cluster lock node (a name with a brace among them),
// each on all three nodes.
func locksPageShowsEveryShard(t *testing.T, addr string, urls []string, addrs [][]string) {
	t.Helper()
	ctx := context.Background()
	c := newClusterLocks(t, urls)
	names := append(redistest.SpreadNames(t, addrs, "held-", clusterKey), "held-}x")
	for _, name := range names {
		l, err := c.TryAcquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Release(ctx) }()
	}
	resp, err := http.Get("http://" + addr + "/locks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || strings.Count(string(body), "3/3 (0,1,2)") < len(names) {
		t.Fatalf("/locks %d, want %d locks on all 3 nodes:\n%s", resp.StatusCode, len(names), body)
	}
	for _, name := range names {
		if !strings.Contains(string(body), name) {
			t.Fatalf("/locks does not list %q (names %q):\n%s", name, names, body)
		}
	}
}
