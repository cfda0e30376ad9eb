package integration

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/middleware"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// hotFairRoom is WORKER_WAIT_ROOM of the several-hot-keys test: asynq takes
// WORKER_CONCURRENCY + room tasks, and at most room may wait.
const (
	hotFairConcurrency = 4
	hotFairRoom        = 8
)

// TestSeveralHotKeysKeepWorkersForCold: three hot SKUs (40 tasks each)
// enqueued ahead of 40 cold tasks, through two worker.New workers of
// concurrency 4 and a wait room of 8 (12 asynq workers each). With the
// room shared out among the hot SKUs (each an equal share of a cap of 8,
// promoted and waiting within it), no worker ever has more than 8 tasks
// waiting for their locks: at least 4 asynq workers always take other
// tasks. The control lifts the cap (a cap too large to bind, as before):
// the hot SKUs' waiters take more than the room, the workers cold tasks
// need. Both runs apply every task exactly once and archive none.
func TestSeveralHotKeysKeepWorkersForCold(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	for _, v := range []struct {
		name string
		cap  int
		fair bool
	}{{"shared-room", hotFairRoom, true}, {"control-no-cap", 1 << 20, false}} {
		t.Run(v.name, func(t *testing.T) {
			most, trips := runHotFair(t, nodes, v.cap)
			t.Logf("most tasks waiting at once in one worker: %d (room %d); hot trips through asynq per hot task %.2f", most, hotFairRoom, trips)
			if v.fair && most > hotFairRoom {
				t.Fatalf("%d tasks waited at once in one worker, more than its room of %d", most, hotFairRoom)
			}
			if !v.fair && most <= hotFairRoom {
				t.Fatalf("control: at most %d tasks waited at once, within the room of %d: the workload does not show what the cap prevents", most, hotFairRoom)
			}
		})
	}
}

// runHotFair runs the workload on two workers whose middleware has a room
// of capSize wait places per worker, and returns the most tasks waiting at
// once in one worker (its open wait spans) and the hot tasks' trips through asynq
// (parks, requeues) per hot task.
func runHotFair(t *testing.T, nodes *redistest.Cluster, capSize int) (most int, trips float64) {
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv := newInventory(t, store, 3*time.Millisecond)
	pc := newParkCount()
	var peak workertest.Peak
	for range 2 {
		w := newWorker(t, workerVars(broker, nodes, map[string]string{
			"WORKER_CONCURRENCY": strconv.Itoa(hotFairConcurrency), "WORKER_WAIT_ROOM": strconv.Itoa(hotFairRoom),
			"WORKER_TASK_CHECK_INTERVAL": "20ms",
		}))
		room := middleware.WithRoom(hotFairConcurrency, capSize)
		waits := &openWaits{peak: &peak}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(waits))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		if err := w.Handle("stock:adjust", inv, middleware.ByField("sku"), room,
			middleware.WithObserver(pc.observe), middleware.WithTracerProvider(tp)); err != nil {
			t.Fatal(err)
		}
		runWorker(t, w)
	}
	adj, expected := hotFairTasks()
	enqueueAdjustments(t, asynqClient(t, broker), adj)
	inv.waitDone(t, len(adj), 3*time.Minute)
	qi := waitQueueEmpty(t, inspector(t, broker), time.Minute)
	if qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	checkAppliedOnce(t, inv, len(adj), expected)
	return int(peak.Load()), float64(pc.get("park")+pc.get("requeue")) / 120
}

// openWaits counts one worker's tasks waiting for their locks: the
// middleware's wait spans (asynqlock.wait) open at once, each inside the
// task's wait place; peak keeps the most.
type openWaits struct {
	n    atomic.Int64
	peak *workertest.Peak
}

func (o *openWaits) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	if s.Name() == "asynqlock.wait" {
		o.peak.See(o.n.Add(1))
	}
}

func (o *openWaits) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == "asynqlock.wait" {
		o.n.Add(-1)
	}
}

func (o *openWaits) Shutdown(context.Context) error   { return nil }
func (o *openWaits) ForceFlush(context.Context) error { return nil }

// hotFairTasks is 40 tasks on each of HOT-1..HOT-3, interleaved, then 40
// cold tasks on 20 SKUs.
func hotFairTasks() ([]adjustment, map[string]int64) {
	var adj []adjustment
	expected := map[string]int64{}
	add := func(sku string) {
		adj = append(adj, adjustment{ID: len(adj), SKU: sku, Delta: 1})
		expected[sku]++
	}
	for i := range 120 {
		add(fmt.Sprintf("HOT-%d", i%3+1))
	}
	for i := range 40 {
		add(fmt.Sprintf("COLD-%02d", i%20))
	}
	return adj, expected
}
