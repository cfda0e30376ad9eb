package integration

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// importRuns is a handler that works a while per task and records its runs
// per task and the most tasks it ran at once.
type importRuns struct {
	work         time.Duration
	inside, peak atomic.Int32
	mu           sync.Mutex
	runs         map[string]int
}

func (h *importRuns) ProcessTask(ctx context.Context, t *asynq.Task) error {
	now := h.inside.Add(1)
	defer h.inside.Add(-1)
	for p := h.peak.Load(); now > p && !h.peak.CompareAndSwap(p, now); p = h.peak.Load() {
	}
	time.Sleep(h.work)
	h.mu.Lock()
	h.runs[string(t.Payload())]++
	h.mu.Unlock()
	return nil
}

func (h *importRuns) done() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.runs)
}

// drainLimited enqueues tasks import tasks of one tenant on queue, then
// starts three servers (as three processes) whose middleware allows limit
// of them at once, and returns how long they took to run all, and the
// handler's record.
func drainLimited(t *testing.T, nodes *redistest.Cluster, broker *redistest.Node, queue string, tasks, limit int) (time.Duration, *importRuns) {
	t.Helper()
	c := asynqClient(t, broker)
	for i := range tasks {
		if _, err := c.Enqueue(asynq.NewTask("tenant:import", []byte(strconv.Itoa(i))), asynq.Queue(queue), asynq.MaxRetry(25)); err != nil {
			t.Fatal(err)
		}
	}
	h := &importRuns{work: 60 * time.Millisecond, runs: map[string]int{}}
	pc := newParkCount()
	defer func() {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		t.Logf("limit %d: parked %d, requeued %d, promoted %d, hand-overs %v", limit, pc.actions["park"], pc.actions["requeue"], pc.promoted, pc.handover)
	}()
	start := time.Now()
	for range 3 {
		mw := middleware.Lock(lockClient(t, nodes, redlock.WithNodeTimeout(time.Second)), middleware.ByType(),
			middleware.WithLimit(limit), middleware.WithBroker(brokerClient(t, broker)), middleware.WithObserver(pc.observe))
		cfg := serverConfig(8)
		cfg.Queues = map[string]int{queue: 1}
		startServer(t, broker, cfg, mw(h))
	}
	deadline := time.Now().Add(3 * time.Minute)
	for h.done() < tasks {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d: %d of %d tasks done after 3m", limit, h.done(), tasks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start), h
}

// TestLimitThroughAsynq: 150 tasks of one type, locked ByType
// WithLimit(3) on three servers: each runs exactly once, never more than 3
// at once, and they drain at least 1.7 times as fast as with the limit 1
// (measured in the same test, on the same nodes, 60ms of work each: a
// limited resource's turn costs a few rounds more than one holder's local
// hand-over, which on a loaded machine under -race weighed as much as 40ms
// of work, 1.6x).
func TestLimitThroughAsynq(t *testing.T) {
	const tasks = 150
	nodes := redistest.StartCluster(t, 5)
	broker := redistest.StartNode(t)
	took3, h3 := drainLimited(t, nodes, broker, "limit3", tasks, 3)
	took1, h1 := drainLimited(t, nodes, broker, "limit1", tasks, 1)
	for limit, h := range map[int]*importRuns{3: h3, 1: h1} {
		for id, n := range h.runs {
			if n != 1 {
				t.Errorf("limit %d: task %s ran %d times", limit, id, n)
			}
		}
		if p := h.peak.Load(); p > int32(limit) {
			t.Errorf("limit %d: %d tasks ran at once", limit, p)
		}
	}
	if p := h3.peak.Load(); p != 3 {
		t.Errorf("limit 3: at most %d tasks ran at once, want 3", p)
	}
	ratio := float64(took1) / float64(took3)
	t.Logf("150 tasks of 60ms: limit 1 took %v, limit 3 took %v: %.2fx", took1.Round(time.Millisecond), took3.Round(time.Millisecond), ratio)
	if ratio < 1.7 {
		t.Errorf("limit 3 drained only %.2fx as fast as limit 1, want at least 1.7x", ratio)
	}
}
