package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// inventoryRun runs n adjustments over skus SKUs through 3 asynq servers of
// concurrency 8, with or without the lock middleware, and returns the lost
// stock units and how often each task was applied.
func inventoryRun(t *testing.T, locked bool, n, skus int) (lost int64, inv *inventory) {
	nodes := redistest.StartCluster(t, 5)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv = newInventory(t, store, time.Millisecond)
	for range 3 {
		var h asynq.Handler = inv
		if locked {
			locks := lockClient(t, nodes)
			h = middleware.Lock(locks, middleware.ByField("sku"), middleware.WithBroker(brokerClient(t, broker)))(inv)
		}
		startServer(t, broker, serverConfig(8), h)
	}
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	expected := map[string]int64{}
	adj := make([]adjustment, n)
	for i := range adj {
		sku := fmt.Sprintf("SKU-%02d", rng.IntN(skus))
		adj[i] = adjustment{ID: i, SKU: sku, Delta: int64(rng.IntN(9) + 1)}
		expected[sku] += adj[i].Delta
	}
	enqueueAdjustments(t, asynqClient(t, broker), adj)
	inv.waitDone(t, n, 3*time.Minute)
	qi := waitQueueEmpty(t, inspector(t, broker), time.Minute)
	if qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	return inv.lost(t, expected), inv
}

// TestInventoryNoLostUpdates: 2,000 read-modify-write adjustments over 20
// SKUs by 3 servers x 8 workers. With the middleware every SKU ends exact
// and every task was applied exactly once; without it updates are lost, so
// the check is known to be able to fail. The two runs, on servers of their
// own and with nothing timed, go side by side.
func TestInventoryNoLostUpdates(t *testing.T) {
	const n = 2000
	t.Run("locked", func(t *testing.T) {
		t.Parallel()
		lost, inv := inventoryRun(t, true, n, 20)
		if lost != 0 {
			t.Fatalf("%d stock units lost with the middleware", lost)
		}
		for id := range n {
			if c := inv.applied[id]; c != 1 {
				t.Fatalf("task %d applied %d times", id, c)
			}
		}
	})
	t.Run("unlocked", func(t *testing.T) {
		t.Parallel()
		lost, _ := inventoryRun(t, false, n, 20)
		if lost == 0 {
			t.Fatal("no update lost without the middleware: the scenario cannot show what the lock prevents")
		}
		t.Logf("without locks %d stock units were lost", lost)
	})
}

// TestHotSKUDoesNotStarveColdOnes: 500 tasks on one SKU beside 500 over 50
// others, with parking. Workers must not all sit blocked on the hot lock:
// the cold tasks finish well before the hot backlog does.
func TestHotSKUDoesNotStarveColdOnes(t *testing.T) {
	nodes := redistest.StartCluster(t, 5)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv := newInventory(t, store, 2*time.Millisecond)
	for range 3 {
		// Parking keeps the waiters' bound hard: without it, short waits
		// pass the bound and the hot SKU's tasks may take every worker.
		h := middleware.Lock(lockClient(t, nodes), middleware.ByField("sku"), middleware.WithBroker(brokerClient(t, broker)))(inv)
		startServer(t, broker, serverConfig(8), h)
	}
	var adj []adjustment
	expected := map[string]int64{}
	for i := range 1000 {
		sku := "HOT"
		if i%2 == 1 {
			sku = fmt.Sprintf("COLD-%02d", i%100/2)
		}
		adj = append(adj, adjustment{ID: i, SKU: sku, Delta: 1})
		expected[sku]++
	}
	start := time.Now()
	enqueueAdjustments(t, asynqClient(t, broker), adj)
	inv.waitDone(t, len(adj), 3*time.Minute)
	if lost := inv.lost(t, expected); lost != 0 {
		t.Fatalf("%d units lost", lost)
	}
	var hot, cold []time.Duration
	for _, a := range adj {
		d := inv.doneAt[a.ID].Sub(start)
		if a.SKU == "HOT" {
			hot = append(hot, d)
		} else {
			cold = append(cold, d)
		}
	}
	sort.Slice(hot, func(i, j int) bool { return hot[i] < hot[j] })
	sort.Slice(cold, func(i, j int) bool { return cold[i] < cold[j] })
	t.Logf("cold: median %v, last %v; hot: median %v, last %v", cold[len(cold)/2], cold[len(cold)-1], hot[len(hot)/2], hot[len(hot)-1])
	if cold[len(cold)-1] >= hot[len(hot)-1] {
		t.Fatalf("the last cold task finished at %v, after the hot backlog (%v): cold SKUs starved", cold[len(cold)-1], hot[len(hot)-1])
	}
	if cold[len(cold)/2] >= hot[len(hot)/2] {
		t.Fatalf("cold median %v not ahead of hot median %v", cold[len(cold)/2], hot[len(hot)/2])
	}
}

// TestConflictWithMaxRetryZeroIsNotArchived: tasks enqueued with
// MaxRetry(0) that meet a busy resource are parked (asynq keeps them in its
// archive meanwhile, and they are brought back from there), never left
// archived, and all complete under their own IDs with their timeout and
// retention.
func TestConflictWithMaxRetryZeroIsNotArchived(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv := newInventory(t, store, 20*time.Millisecond)
	var parked atomic.Int64
	obs := func(e middleware.Event) {
		if e.Kind == "conflict" && e.Action == "park" {
			parked.Add(1)
		}
	}
	insp := inspector(t, broker)
	// Requeue: no task waits (a short wait would otherwise serve them all).
	h := middleware.Lock(lockClient(t, nodes), middleware.ByField("sku"), middleware.WithObserver(obs),
		middleware.Requeue(),
		middleware.WithBroker(brokerClient(t, broker)))(inv)
	startServer(t, broker, serverConfig(8), h)
	adj := make([]adjustment, 24)
	expected := map[string]int64{}
	for i := range adj {
		adj[i] = adjustment{ID: i, SKU: "ONE", Delta: 1}
		expected["ONE"]++
	}
	const timeout, retention = 45 * time.Second, time.Hour
	enqueueAdjustments(t, asynqClient(t, broker), adj, asynq.MaxRetry(0), asynq.Timeout(timeout), asynq.Retention(retention))
	inv.waitDone(t, len(adj), 2*time.Minute)
	qi := waitQueueEmpty(t, insp, time.Minute)
	if qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	if lost := inv.lost(t, expected); lost != 0 {
		t.Fatalf("%d units lost", lost)
	}
	if parked.Load() == 0 {
		t.Fatal("no conflict on a last retry happened: the test did not exercise parking on a last retry")
	}
	done, err := insp.ListCompletedTasks("default", asynq.PageSize(1000))
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != len(adj) {
		t.Fatalf("%d completed tasks, want %d", len(done), len(adj))
	}
	for _, ti := range done {
		if strings.Contains(ti.ID, "~r") || ti.Timeout != timeout || ti.Retention != retention || ti.MaxRetry != 0 {
			t.Fatalf("completed %s with timeout %v, retention %v, max retry %d; want its own ID, %v, %v, 0",
				ti.ID, ti.Timeout, ti.Retention, ti.MaxRetry, timeout, retention)
		}
	}
}

// TestShutdownReleasesLocksAndRequeues: a server shut down while handlers
// run cancels them, their locks are released, and the tasks go back to the
// queue; a new server completes them.
func TestShutdownReleasesLocksAndRequeues(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	locks := lockClient(t, nodes)
	inv := newInventory(t, store, 0)
	started := make(chan struct{}, 8)
	blocking := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		started <- struct{}{}
		<-ctx.Done() // a long task, cut by the shutdown
		return ctx.Err()
	})
	cfg := serverConfig(4)
	cfg.ShutdownTimeout = 500 * time.Millisecond
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: broker.Addr()}, cfg)
	if err := srv.Start(middleware.Lock(locks, middleware.ByField("sku"))(blocking)); err != nil {
		t.Fatal(err)
	}
	adj := []adjustment{{ID: 1, SKU: "A", Delta: 1}, {ID: 2, SKU: "B", Delta: 2}}
	enqueueAdjustments(t, asynqClient(t, broker), adj)
	for range adj {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("tasks never started")
		}
	}
	srv.Shutdown()
	// Locks are released once the handlers return (bounded wait).
	deadline := time.Now().Add(10 * time.Second)
	for _, sku := range []string{"A", "B"} {
		for {
			st, err := locks.Inspect(context.Background(), "task:stock:adjust:"+sku)
			if err != nil {
				t.Fatal(err)
			}
			held := 0
			for _, s := range st {
				if s.Token != "" {
					held++
				}
			}
			if held == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lock of %s still held after shutdown", sku)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	qi, err := inspector(t, broker).GetQueueInfo("default")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Archived != 0 || qi.Pending+qi.Retry+qi.Scheduled+qi.Active != len(adj) {
		t.Fatalf("after shutdown: %+v; want both tasks back in the queue", qi)
	}
	startServer(t, broker, serverConfig(4), middleware.Lock(locks, middleware.ByField("sku"))(inv))
	inv.waitDone(t, len(adj), time.Minute)
}
