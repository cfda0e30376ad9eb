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
// of them at once, and returns how long they took to run all (each doing
// work), and the handler's record. The servers stop once all ran.
func drainLimited(t *testing.T, nodes *redistest.Cluster, broker *redistest.Node, queue string, tasks, limit int, work time.Duration) (time.Duration, *importRuns) {
	t.Helper()
	c := asynqClient(t, broker)
	for i := range tasks {
		if _, err := c.Enqueue(asynq.NewTask("tenant:import", []byte(strconv.Itoa(i))), asynq.Queue(queue), asynq.MaxRetry(25)); err != nil {
			t.Fatal(err)
		}
	}
	h := &importRuns{work: work, runs: map[string]int{}}
	pc := newParkCount()
	defer func() {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		t.Logf("limit %d: parked %d, requeued %d, promoted %d, hand-overs %v", limit, pc.actions["park"], pc.actions["requeue"], pc.promoted, pc.handover)
	}()
	var servers []*asynq.Server
	defer func() {
		for _, s := range servers {
			s.Shutdown()
		}
	}()
	start := time.Now()
	for range 3 {
		mw := middleware.Lock(lockClient(t, nodes, redlock.WithNodeTimeout(time.Second)), middleware.ByType(),
			middleware.WithLimit(limit), middleware.WithBroker(brokerClient(t, broker)), middleware.WithObserver(pc.observe))
		cfg := serverConfig(8)
		cfg.Queues = map[string]int{queue: 1}
		servers = append(servers, startServer(t, broker, cfg, mw(h)))
	}
	deadline := time.Now().Add(3 * time.Minute)
	for h.done() < tasks {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d: %d of %d tasks done after 3m", limit, h.done(), tasks)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), h
}

// limitPairs bounds the pairs of drains TestLimitThroughAsynq measures: a
// pair whose ratio misses (a burst of load on a shared machine) is measured
// again, and the test fails only if every pair misses.
const limitPairs = 4

// TestLimitThroughAsynq: 150 tasks of 10ms of one type, locked ByType on
// three servers, WithLimit(3) and WithLimit(1) alternated on the same
// nodes: each runs exactly once, never more than n at once (3 reached), and
// limit 3 drains in less than 0.8 of limit 1's time (slots that took turns
// one at a time would give about 1). BenchmarkLimitDrain measures about
// 0.3-0.4 (ideally 1/3: a slot's turn costs what one holder's local
// hand-over costs); the slack is for a loaded machine under -race, where
// the turns' CPU weighs more against a task's 10ms of work: in a CI run
// beside other packages' tests and two busy loops, three pairs gave 0.64,
// 0.70 and 0.91.
func TestLimitThroughAsynq(t *testing.T) {
	const tasks, work, want = 150, 10 * time.Millisecond, 0.8
	nodes := redistest.StartCluster(t, 5)
	broker := redistest.StartNode(t)
	ratios := make([]float64, 0, limitPairs)
	for pair := range limitPairs {
		took := map[int]time.Duration{}
		for _, limit := range limitOrder(pair) {
			d, h := drainLimited(t, nodes, broker, "limit"+strconv.Itoa(limit)+"-"+strconv.Itoa(pair), tasks, limit, work)
			checkLimitRuns(t, limit, tasks, h)
			took[limit] = d
		}
		ratio := float64(took[3]) / float64(took[1])
		ratios = append(ratios, ratio)
		t.Logf("150 tasks of 10ms: limit 1 took %v, limit 3 took %v: %.2f of it", took[1].Round(time.Millisecond), took[3].Round(time.Millisecond), ratio)
		if ratio < want || t.Failed() {
			return
		}
	}
	t.Errorf("limit 3 drained in %.2f of limit 1's time in every pair, want below %.2f", ratios, want)
}

// limitOrder alternates which limit drains first.
func limitOrder(pair int) []int {
	if pair%2 == 1 {
		return []int{1, 3}
	}
	return []int{3, 1}
}

// checkLimitRuns checks one drain: every task once, never more than limit
// at once, and limit reached.
func checkLimitRuns(t *testing.T, limit, tasks int, h *importRuns) {
	t.Helper()
	for id, n := range h.runs {
		if n != 1 {
			t.Errorf("limit %d: task %s ran %d times", limit, id, n)
		}
	}
	if len(h.runs) != tasks {
		t.Errorf("limit %d: %d distinct tasks ran, want %d", limit, len(h.runs), tasks)
	}
	if p := h.peak.Load(); p != int32(limit) {
		t.Errorf("limit %d: at most %d tasks ran at once, want %d", limit, p, limit)
	}
}
