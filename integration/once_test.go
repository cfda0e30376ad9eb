package integration

import (
	"context"
	"encoding/json"
	"fmt"
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

// counting is a handler that is not idempotent on purpose: a read-modify-
// write of the SKU's stock, so that a second run of a task shows in the
// stock, and a count of its runs per task.
type counting struct {
	store    *redis.Client
	work     time.Duration
	inflight atomic.Int32
	mu       sync.Mutex
	runs     map[int]int
	// gate, while set, holds each handler before its write (at most 10s),
	// so that the broker can be killed with handlers surely running even
	// when a loaded machine is slow to run the test's own goroutine.
	gate atomic.Pointer[chan struct{}]
}

func (h *counting) ProcessTask(ctx context.Context, t *asynq.Task) error {
	h.inflight.Add(1)
	defer h.inflight.Add(-1)
	var a adjustment
	if err := json.Unmarshal(t.Payload(), &a); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	v, err := h.store.Get(ctx, "stock:"+a.SKU).Int64()
	if err != nil && err != redis.Nil {
		return err
	}
	time.Sleep(h.work)
	if g := h.gate.Load(); g != nil {
		select {
		case <-*g:
		case <-time.After(10 * time.Second):
		}
	}
	if err := h.store.Set(ctx, "stock:"+a.SKU, v+a.Delta, 0).Err(); err != nil {
		return err
	}
	h.mu.Lock()
	h.runs[a.ID]++
	h.mu.Unlock()
	return nil
}

// tally returns how many tasks ran at least once, and the runs beyond one.
func (h *counting) tally() (ran, extra int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.runs {
		ran++
		extra += n - 1
	}
	return ran, extra
}

// skipCount counts the middleware's skipped re-deliveries.
type skipCount struct{ n atomic.Int32 }

func (s *skipCount) observe(e middleware.Event) {
	if e.Kind == "redelivery_skipped" {
		s.n.Add(1)
	}
}

// TestOnceAcrossABrokerOutage: 3 asynq servers run 300 non-idempotent stock
// updates over 20 SKUs; the broker (append-only file, synced on every write)
// is SIGKILLed a third of the way in and restarted with its data 10s later,
// and a lock node is restarted empty (after a TTL, as Redlock asks) while
// the tasks that finished during the outage are still to come back. asynq
// could not record the completion of the tasks that ran through the kill,
// so it delivers them again once their leases expired. With completion
// records every task runs once and every SKU is exact; the control, records
// off, runs those tasks twice.
func TestOnceAcrossABrokerOutage(t *testing.T) {
	t.Parallel()
	for _, records := range []bool{true, false} {
		t.Run(fmt.Sprintf("records=%v", records), func(t *testing.T) {
			t.Parallel()
			extra, skipped, stockOff := runBrokerOutage(t, records)
			t.Logf("records %v: %d extra runs, %d re-deliveries skipped, stock off by %d", records, extra, skipped, stockOff)
			switch {
			case records && (extra != 0 || stockOff != 0):
				t.Fatalf("with records: %d tasks ran again, stock off by %d units", extra, stockOff)
			case records && skipped == 0:
				t.Fatal("with records: no re-delivery was skipped: the outage did not force one")
			case !records && extra == 0:
				t.Fatal("control without records: no task ran twice, so the test cannot tell")
			}
		})
	}
}

// runBrokerOutage runs the scenario of TestOnceAcrossABrokerOutage and
// returns the runs beyond one per task, the skipped re-deliveries and how
// far the stocks are from the expected.
func runBrokerOutage(t *testing.T, records bool) (extra, skipped int, stockOff int64) {
	const nTasks, nSKUs, ttl = 300, 20, 2 * time.Second
	nodes := redistest.StartCluster(t, 3)
	broker, store := redistest.StartDurableNode(t), redistest.StartNode(t)
	h := &counting{store: store.Client(t), work: 20 * time.Millisecond, runs: map[int]int{}}
	window := time.Duration(0)
	if records {
		window = time.Hour
	}
	var skips skipCount
	servers := make([]*asynq.Server, 3)
	for i := range servers {
		mw := middleware.Lock(lockClient(t, nodes, redlock.WithNodeTimeout(time.Second)), middleware.ByField("sku"),
			middleware.WithBroker(brokerClient(t, broker)), middleware.WithTTL(ttl),
			middleware.WithCompletionWindow(window), middleware.WithObserver(skips.observe))
		servers[i] = startServer(t, broker, serverConfig(4), mw(h))
	}
	adj, expected := make([]adjustment, nTasks), map[string]int64{}
	for i := range adj {
		adj[i] = adjustment{ID: i, SKU: fmt.Sprintf("SKU-%02d", i%nSKUs), Delta: 1}
		expected[adj[i].SKU]++
	}
	enqueueAdjustments(t, asynqClient(t, broker), adj)
	waitRan(t, h, nTasks/3, time.Minute)
	gate := make(chan struct{})
	h.gate.Store(&gate)
	waitInflight(t, h, 3, 30*time.Second) // kill while handlers run: their completion cannot be recorded
	if err := broker.Kill(); err != nil {
		t.Fatal(err)
	}
	h.gate.Store(nil)
	close(gate)
	if err := broker.Restart(10 * time.Second); err != nil { // already down: back with its data 10s on
		t.Fatal(err)
	}
	// A lock node comes back empty, a TTL after it died: the records of
	// the tasks that finished during the outage are on the other two.
	if err := nodes.Nodes[0].Restart(ttl + 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	reclaimExpiredLeases(t, broker, func() {
		startServer(t, broker, serverConfig(4), middleware.Lock(lockClient(t, nodes, redlock.WithNodeTimeout(time.Second)),
			middleware.ByField("sku"), middleware.WithBroker(brokerClient(t, broker)), middleware.WithTTL(ttl),
			middleware.WithCompletionWindow(window), middleware.WithObserver(skips.observe))(h))
	})
	waitRan(t, h, nTasks, time.Minute)
	waitQueueEmpty(t, inspector(t, broker), time.Minute)
	_, extra = h.tally()
	stock := &inventory{store: h.store}
	return extra, int(skips.n.Load()), stock.lost(t, expected)
}

// waitRan waits (bounded) until n distinct tasks ran.
func waitRan(t *testing.T, h *counting, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if ran, _ := h.tally(); ran >= n {
			return
		}
		if time.Now().After(deadline) {
			ran, _ := h.tally()
			t.Fatalf("only %d of %d tasks ran after %v", ran, n, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitInflight waits (bounded) until at least n handlers run at once.
func waitInflight(t *testing.T, h *counting, n int32, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for h.inflight.Load() < n {
		if time.Now().After(deadline) {
			ran, _ := h.tally()
			t.Fatalf("never %d handlers running at once in %v (%d tasks ran)", n, limit, ran)
		}
		time.Sleep(time.Millisecond)
	}
}

// reclaimExpiredLeases waits until every active task's lease has expired
// (asynq: orphaned), then 30s more, and calls start, which starts a server:
// asynq's recoverer takes back tasks whose lease expired 30s ago or more, at
// a server's start and then once a minute, so that the wait is asynq's. It
// returns at once when no task is active.
func reclaimExpiredLeases(t *testing.T, broker *redistest.Node, start func()) {
	t.Helper()
	insp := inspector(t, broker)
	deadline := time.Now().Add(45 * time.Second)
	for {
		active, err := insp.ListActiveTasks("default", asynq.PageSize(100))
		if err != nil {
			t.Fatal(err)
		}
		orphaned := 0
		for _, ti := range active {
			if ti.IsOrphaned {
				orphaned++
			}
		}
		if len(active) == 0 {
			return
		}
		if orphaned == len(active) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d active tasks orphaned 45s on", orphaned, len(active))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(30*time.Second + 250*time.Millisecond)
	start()
}
