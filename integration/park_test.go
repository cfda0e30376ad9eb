package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// parkCount counts the middleware's parking events.
type parkCount struct {
	mu       sync.Mutex
	actions  map[string]int // conflict actions
	promoted int
	handover map[string]int
}

func newParkCount() *parkCount {
	return &parkCount{actions: map[string]int{}, handover: map[string]int{}}
}

func (c *parkCount) observe(e middleware.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Kind {
	case "conflict":
		c.actions[e.Action]++
	case "promoted":
		c.promoted++
	case "acquired":
		c.handover[e.Handover]++
	}
}

func (c *parkCount) get(action string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.actions[action]
}

// brokerClient is a go-redis client to the asynq broker, for parking.
func brokerClient(t *testing.T, broker *redistest.Node) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: broker.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// hotMix is half of n tasks on SKU "HOT", half over 50 cold SKUs.
func hotMix(n int) ([]adjustment, map[string]int64) {
	adj := make([]adjustment, n)
	expected := map[string]int64{}
	for i := range adj {
		sku := "HOT"
		if i%2 == 1 {
			sku = fmt.Sprintf("COLD-%02d", i%100/2)
		}
		adj[i] = adjustment{ID: i, SKU: sku, Delta: 1}
		expected[sku]++
	}
	return adj, expected
}

// checkAppliedOnce fails unless every task was applied exactly once and every SKU
// holds its exact stock.
func checkAppliedOnce(t *testing.T, inv *inventory, n int, expected map[string]int64) {
	t.Helper()
	if lost := inv.lost(t, expected); lost != 0 {
		t.Fatalf("stock off by %d units", lost)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for id := range n {
		if c := inv.applied[id]; c != 1 {
			t.Fatalf("task %d applied %d times", id, c)
		}
	}
}

// TestHotMixParksOnce: 300 tasks on one SKU among 600, 3 servers x 8
// workers, with parking. Every task runs once, stocks are exact, nothing is
// archived, parked tasks were promoted (not only returned by their
// backstop), and a hot task went back to asynq about once (at most 1.25
// times on average).
func TestHotMixParksOnce(t *testing.T) {
	nodes := redistest.StartCluster(t, 5)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv := newInventory(t, store, 2*time.Millisecond)
	pc := newParkCount()
	for range 3 {
		h := middleware.Lock(lockClient(t, nodes, redlock.WithNodeTimeout(time.Second)), middleware.ByField("sku"), middleware.WithObserver(pc.observe),
			middleware.WithBroker(brokerClient(t, broker)))(inv)
		startServer(t, broker, serverConfig(8), h)
	}
	adj, expected := hotMix(600)
	enqueueAdjustments(t, asynqClient(t, broker), adj)
	inv.waitDone(t, len(adj), 3*time.Minute)
	qi := waitQueueEmpty(t, inspector(t, broker), time.Minute)
	if qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	checkAppliedOnce(t, inv, len(adj), expected)
	parked, requeued := pc.get("park"), pc.get("requeue")
	t.Logf("parked %d, requeued %d, promoted %d, hand-overs %v", parked, requeued, pc.promoted, pc.handover)
	if parked == 0 || pc.promoted == 0 {
		t.Fatalf("parked %d, promoted %d: the hot SKU did not exercise parking", parked, pc.promoted)
	}
	// Quiet, 262-284 parks for the 300 hot tasks; beside the rest of the
	// integration package under -race and two busy loops, 315 once: a
	// promoted task that finds its process's wait places full is parked
	// again, and a loaded machine has more tasks in flight.
	if per := float64(parked+requeued) / 300; per > 1.25 {
		t.Fatalf("%.2f trips through asynq per hot task, want at most 1.25", per)
	}
}

// TestParkedMaxRetryZeroTasks: hot tasks enqueued with MaxRetry(0) are
// parked as copies (asynq would archive them on any error), none is
// archived, each runs once.
func TestParkedMaxRetryZeroTasks(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv := newInventory(t, store, 5*time.Millisecond)
	pc := newParkCount()
	insp := inspector(t, broker)
	for range 2 {
		h := middleware.Lock(lockClient(t, nodes, redlock.WithNodeTimeout(time.Second)), middleware.ByField("sku"), middleware.WithObserver(pc.observe),
			middleware.WithBroker(brokerClient(t, broker)), middleware.WithRoom(0, 3))(inv)
		startServer(t, broker, serverConfig(8), h)
	}
	adj := make([]adjustment, 60)
	expected := map[string]int64{}
	for i := range adj {
		adj[i] = adjustment{ID: i, SKU: "ONE", Delta: 1}
		expected["ONE"]++
	}
	enqueueAdjustments(t, asynqClient(t, broker), adj, asynq.MaxRetry(0))
	inv.waitDone(t, len(adj), 2*time.Minute)
	qi := waitQueueEmpty(t, insp, time.Minute)
	if qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	checkAppliedOnce(t, inv, len(adj), expected)
	if pc.get("park") == 0 {
		t.Fatal("no task was parked: the test did not exercise parking on a last retry")
	}
	t.Logf("parked %d, promoted %d", pc.get("park"), pc.promoted)
}

// TestStalePromotionDoesNotRerunCompletedTask: a task parked once, then run
// to completion and kept by Retention, must not run again when a stale
// parking record of it is met by a promotion. The control shows the hazard
// is real: asynq's Inspector.RunTask does run the completed task again.
func TestStalePromotionDoesNotRerunCompletedTask(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	broker := redistest.StartNode(t)
	locks := lockClient(t, nodes, redlock.WithNodeTimeout(time.Second))
	var runs sync.Map // task id -> *atomic.Int64
	// Records off: the stale record must keep the task from running by
	// itself, and the control's RunTask would otherwise find the task's
	// completion record and be skipped (TestOnceAcrossABrokerOutage).
	h := middleware.Lock(locks, middleware.ByType(), middleware.Requeue(),
		middleware.WithBroker(brokerClient(t, broker)), middleware.WithCompletionWindow(0))(
		asynq.HandlerFunc(func(ctx context.Context, tk *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			n, _ := runs.LoadOrStore(id, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return nil
		}))
	startServer(t, broker, serverConfig(4), h)
	count := func(id string) int64 {
		if n, ok := runs.Load(id); ok {
			return n.(*atomic.Int64).Load()
		}
		return 0
	}
	ctx := context.Background()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	held, err := locks.Acquire(actx, "task:job:job", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cl, insp := asynqClient(t, broker), inspector(t, broker)
	if _, err := cl.Enqueue(asynq.NewTask("job", nil), asynq.TaskID("A"), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "task A parked", func() bool {
		ti, err := insp.GetTaskInfo("default", "A")
		return err == nil && ti.State == asynq.TaskStateRetry
	})
	ti, _ := insp.GetTaskInfo("default", "A")
	nonce := parkNonce(t, ti.LastErr)
	_ = held.Release(ctx)
	waitFor(t, "task A completed", func() bool {
		ti, err := insp.GetTaskInfo("default", "A")
		return err == nil && ti.State == asynq.TaskStateCompleted && count("A") == 1
	})
	// A stale record of A, as a promotion racing A's return would leave.
	raw := brokerClient(t, broker)
	fifo := "asynq:{default}:asynqlock:park:task:job:job"
	stale := fmt.Sprintf("%d|%s|A", time.Now().Add(-time.Minute).UnixMilli(), nonce)
	if err := raw.RPush(ctx, fifo, stale).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(asynq.NewTask("job", nil), asynq.TaskID("B")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "task B ran and the record was consumed", func() bool {
		n, _ := raw.LLen(ctx, fifo).Result()
		return count("B") == 1 && n == 0
	})
	time.Sleep(500 * time.Millisecond) // a wrongly promoted A would run now
	if n := count("A"); n != 1 {
		t.Fatalf("completed task A ran %d times after a stale promotion", n)
	}
	// Control: asynq's own RunTask runs the completed task again.
	if err := insp.RunTask("default", "A"); err != nil {
		t.Fatalf("control: RunTask on a completed task: %v", err)
	}
	waitFor(t, "control: A run again by RunTask", func() bool { return count("A") == 2 })
}

// parkNonce extracts the parking nonce from a parked task's last error.
func parkNonce(t *testing.T, lastErr string) string {
	t.Helper()
	_, after, ok := strings.Cut(lastErr, "(parked ")
	nonce, _, ok2 := strings.Cut(after, ")")
	if !ok || !ok2 || nonce == "" {
		t.Fatalf("no parking nonce in the parked task's error %q", lastErr)
	}
	return nonce
}

// waitFor polls cond (bounded by 30s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDefaultConfigHotSKU: asynq's default Config (concurrency 8) and a bare
// middleware, as a new user writes it: 600 tasks, half on one SKU, 3
// servers, 2ms of work each. Nothing is lost, doubled or archived, and the
// hot SKU drains without trips through asynq's retry set (which, with the
// default RetryDelayFunc, keep a task away 15s and more and count as
// failures). The time it took is logged.
func TestDefaultConfigHotSKU(t *testing.T) {
	nodes := redistest.StartCluster(t, 5)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv := newInventory(t, store, 2*time.Millisecond)
	pc := newParkCount()
	for range 3 {
		h := middleware.Lock(lockClient(t, nodes, redlock.WithNodeTimeout(time.Second)), middleware.ByField("sku"), middleware.WithObserver(pc.observe))(inv)
		startServer(t, broker, asynq.Config{Concurrency: 8, Logger: quietAsynq{}, LogLevel: asynq.FatalLevel}, h)
	}
	adj, expected := hotMix(600)
	start := time.Now()
	enqueueAdjustments(t, asynqClient(t, broker), adj)
	inv.waitDone(t, len(adj), 3*time.Minute)
	took := time.Since(start)
	qi := waitQueueEmpty(t, inspector(t, broker), time.Minute)
	if qi.Archived != 0 || qi.Failed != 0 {
		t.Fatalf("%d tasks archived, %d failures", qi.Archived, qi.Failed)
	}
	checkAppliedOnce(t, inv, len(adj), expected)
	t.Logf("600 tasks (300 hot) done in %v, enqueueing included; conflicts %v", took, pc.actions)
	if n := pc.get("requeue"); n != 0 {
		t.Fatalf("%d hot tasks went through the retry set: each costs 15s or more with the default Config", n)
	}
}
