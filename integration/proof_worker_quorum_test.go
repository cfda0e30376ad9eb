package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// TestProofQuorumLoss: 3 of 5 lock nodes are killed while a worker
// (worker.New, in process) runs a stream of locked tasks, and more tasks
// arrive during the outage. While the quorum is lost no task may start its
// critical section: locked tasks are requeued (not archived, not lost,
// their retry budget untouched) and /readyz answers 503. When the nodes come
// back (empty, after more than the lock TTL: the delayed-restart rule),
// /readyz answers 200 again and the backlog drains: every task applied
// exactly once, nothing archived, every SKU's stock exact.
func TestProofQuorumLoss(t *testing.T) {
	const (
		nTasks   = 120
		nSKUs    = 6
		ttl      = time.Second
		killedAt = 20 // tasks done when the nodes are killed
		// grace covers a handler that starts just after the third kill
		// with a lock acquired just before it.
		grace = 250 * time.Millisecond
	)
	nodes := redistest.StartCluster(t, 5)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv := newInventory(t, store, 10*time.Millisecond)
	var mu sync.Mutex
	var starts []time.Time // of the handlers (under their lock)
	h := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return inv.ProcessTask(ctx, task)
	})
	w := newWorker(t, workerVars(broker, nodes, map[string]string{
		"REDLOCK_TTL":               ttl.String(),
		"WORKER_CONCURRENCY":        "8",
		"WORKER_READINESS_INTERVAL": "50ms",
	}))
	if err := w.Handle(taskType, h, middleware.ByField("sku")); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	waitReadyz(t, w, 200, 10*time.Second)
	insp := inspector(t, broker)
	client := asynqClient(t, broker)

	expected := map[string]int64{}
	adj := make([]adjustment, nTasks)
	for i := range adj {
		adj[i] = adjustment{ID: i, SKU: fmt.Sprintf("SKU-%d", i%nSKUs), Delta: 1}
		expected[adj[i].SKU]++
	}
	half := nTasks / 2
	enqueueAdjustments(t, client, adj[:half])
	inv.waitDone(t, killedAt, 10*time.Second)
	for _, n := range nodes.Nodes[:3] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	quorumLost := time.Now()
	doneAtLoss := inv.done()
	if doneAtLoss >= half {
		t.Fatalf("all %d tasks of the first batch were done before the nodes were killed: the fault did not hit a running stream", doneAtLoss)
	}
	enqueueAdjustments(t, client, adj[half:]) // the backlog grows during the outage
	notReady := waitReadyz(t, w, 503, 10*time.Second)

	// Keep the nodes down until every task not yet done has been requeued
	// at least once for want of a quorum, and for more than the TTL.
	requeued, spent := map[int]bool{}, map[int]bool{} // payload IDs
	deadline := time.Now().Add(15 * time.Second)
	for {
		retry, err := insp.ListRetryTasks("default", asynq.PageSize(nTasks))
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range retry {
			var a adjustment
			if json.Unmarshal(ti.Payload, &a) != nil || !strings.Contains(ti.LastErr, redlock.ErrQuorum.Error()) {
				continue
			}
			if !strings.Contains(ti.LastErr, "lock nodes unreachable, task requeued") {
				t.Fatalf("task %s requeued with %q, not as a lock-node outage", ti.ID, ti.LastErr)
			}
			requeued[a.ID] = true
			if ti.Retried > 0 {
				spent[a.ID] = true
			}
		}
		all := true
		inv.mu.Lock()
		for _, a := range adj {
			if inv.applied[a.ID] == 0 && !requeued[a.ID] {
				all = false
				break
			}
		}
		inv.mu.Unlock()
		if all && time.Since(quorumLost) > ttl+250*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every waiting task was requeued for want of a quorum within 15s (%d were)", len(requeued))
		}
		time.Sleep(50 * time.Millisecond)
	}
	qi, err := insp.GetQueueInfo("default")
	if err != nil {
		t.Fatal(err)
	}
	doneInOutage := inv.done()
	waiting := qi.Pending + qi.Active + qi.Scheduled + qi.Retry
	if qi.Archived != 0 || waiting != nTasks-doneInOutage {
		t.Fatalf("during the outage: %+v; want the %d tasks not done waiting, none archived", qi, nTasks-doneInOutage)
	}

	back := time.Now()
	for _, n := range nodes.Nodes[:3] {
		if err := n.Restart(0); err != nil { // down for more than the TTL already
			t.Fatal(err)
		}
	}
	backAt := time.Now()
	ready := waitReadyz(t, w, 200, 10*time.Second)
	inv.waitDone(t, nTasks, 30*time.Second)
	final := waitQueueEmpty(t, insp, 10*time.Second)
	drained := time.Now()

	unlocked := 0 // handlers started while no quorum could be had
	mu.Lock()
	for _, s := range starts {
		if s.After(quorumLost.Add(grace)) && s.Before(back) {
			unlocked++
		}
	}
	mu.Unlock()
	duplicated := 0
	for _, a := range adj {
		duplicated += max(inv.applied[a.ID]-1, 0)
	}
	unitsLost := inv.lost(t, expected)
	requeues := counter(t, w, "asynqlock_task_conflicts_total", map[string]string{"action": "requeue"})
	report.Add(Row{
		Scenario:   fmt.Sprintf("asynq worker (worker.New, concurrency 8): %d tasks over %d SKUs, 5 nodes", nTasks, nSKUs),
		Fault:      "3 of 5 lock nodes SIGKILLed mid-stream, restarted empty once every waiting task was requeued",
		Ops:        inv.done(),
		Violations: unlocked + final.Archived,
		Lost:       int(unitsLost),
		Duplicated: duplicated,
		Recovery:   drained.Sub(backAt),
		Notes: fmt.Sprintf("nodes down %v (more than the TTL %v: the delayed-restart rule); %d tasks done before the kill; /readyz 503 %v after it; while the quorum was lost %d tasks waited "+
			"(%d of them enqueued during the outage), %d critical sections began, %d tasks were archived, %d had their retry budget consumed; "+
			"%d requeues (conflict policy wait: a quorum error requeues at once, 1-5s later); nodes back: /readyz 200 after %v, backlog drained after %v "+
			"(paced by the 1-5s requeue delay of a quorum error); every task applied exactly once, stock exact",
			back.Sub(quorumLost).Round(10*time.Millisecond), ttl, doneAtLoss, notReady.Sub(quorumLost).Round(time.Millisecond), waiting, nTasks-half, unlocked, qi.Archived, len(spent),
			int(requeues), ready.Sub(backAt).Round(time.Millisecond), drained.Sub(backAt).Round(10*time.Millisecond)),
	})

	if unlocked != 0 {
		t.Fatalf("%d handlers started while 3 of 5 lock nodes were down", unlocked)
	}
	if final.Archived != 0 || unitsLost != 0 || duplicated != 0 {
		t.Fatalf("%d archived, %d units lost, %d tasks applied twice", final.Archived, unitsLost, duplicated)
	}
	if len(spent) != 0 {
		t.Fatalf("%d tasks had their retry budget consumed by the outage", len(spent))
	}
	// Only tasks in flight at the loss may complete after it: the 8 running
	// and those of the wait room (16 by default) that held their locks, or
	// were handed them within their predecessors' validity, before the
	// quorum went; none started after the grace (unlocked, above).
	if inFlight := 8 + 16; doneInOutage-doneAtLoss > inFlight {
		t.Fatalf("%d tasks completed after the quorum was lost (at most the %d in flight may)", doneInOutage-doneAtLoss, inFlight)
	}
	t.Logf("readyz 503 after %v; outage %v; readyz 200 %v and drained %v after the nodes came back; %d requeues",
		notReady.Sub(quorumLost), back.Sub(quorumLost), ready.Sub(backAt), drained.Sub(backAt), int(requeues))
}
