package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/hibiken/asynq"
)

// TestOpsNodeOutagesAreLoudOncePerChange walks a worker through a degraded
// state, a quorum outage and the recovery, asserting what the operator sees
// at each step: Warn records naming each node and its cause (once per change
// of state), /readyz's body, the metrics and the task's last error.
func TestOpsNodeOutagesAreLoudOncePerChange(t *testing.T) {
	broker := redistest.StartNode(t)
	cl := redistest.StartCluster(t, 5)
	o := newOpsWorker(t, opsVars(broker.URL(), cl.URLs(), nil))
	o.run(t)
	o.waitRecord(t, "INFO", "worker ready", nil, 30*time.Second)
	o.waitReadyzBody(t, 200, 30*time.Second, "ready")
	addr := func(i int) string { return cl.Nodes[i].Addr() }

	cl.Nodes[0].Refuse()
	cl.Nodes[1].Refuse()
	for i := range 2 {
		o.waitRecord(t, "WARN", "lock node unreachable", map[string]string{"addr": addr(i)}, 30*time.Second)
	}
	o.waitRecord(t, "WARN", "lock nodes degraded", nil, 30*time.Second)
	o.waitReadyzBody(t, 200, 30*time.Second, "lock nodes degraded", "3 of 5 lock nodes up (quorum 3)", addr(0), addr(1))
	if g := gauge(t, o.w, "asynqlock_lock_degraded", nil); g != 1 {
		t.Fatalf("asynqlock_lock_degraded = %v, want 1", g)
	}

	cl.Nodes[2].Refuse()
	o.waitRecord(t, "WARN", "lock quorum lost", nil, 30*time.Second)
	o.waitRecord(t, "WARN", "worker not ready", map[string]string{"why": addr(2)}, 30*time.Second)
	o.waitReadyzBody(t, 503, 30*time.Second, "not ready: lock quorum lost: 2 of 5 lock nodes up (quorum 3)", addr(0), addr(1), addr(2))

	checkOutageTaskError(t, o, broker)

	// Several more probes change nothing, so nothing more is logged.
	time.Sleep(time.Second)
	if n := len(matching(o.records(t), "WARN", "lock node unreachable", map[string]string{"addr": addr(0)})); n != 1 {
		t.Fatalf("node 0's outage logged %d times, want once", n)
	}

	for i := range 3 {
		cl.Nodes[i].Heal()
	}
	for i := range 3 {
		o.waitRecord(t, "INFO", "lock node reachable again", map[string]string{"addr": addr(i)}, 30*time.Second)
	}
	o.waitRecord(t, "INFO", "all lock nodes reachable", nil, 30*time.Second)
	o.waitReadyzBody(t, 200, 30*time.Second, "ready")
	select {
	case <-o.done: // the requeued task ran once the nodes were back
	case <-time.After(30 * time.Second):
		t.Fatalf("requeued task not processed after recovery; log:\n%s", o.logs)
	}
	if n := len(matching(o.records(t), "INFO", "worker ready", nil)); n != 2 {
		t.Fatalf("readiness gained %d times, want twice (start, recovery)", n)
	}

	// Control for "once per change": a second outage is logged again.
	cl.Nodes[0].Refuse()
	deadline := time.Now().Add(30 * time.Second)
	for len(matching(o.records(t), "WARN", "lock node unreachable", map[string]string{"addr": addr(0)})) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("node 0's second outage not logged; log:\n%s", o.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOutageTaskError enqueues a task during a quorum outage: it is
// requeued, and its last error (what asynq's CLI shows) says why.
func checkOutageTaskError(t *testing.T, o *opsWorker, broker *redistest.Node) {
	t.Helper()
	info, err := o.w.Client().Enqueue(asynq.NewTask(opsTask, []byte(`{"id":"outage"}`)))
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: broker.Addr()})
	defer insp.Close()
	lastErr := waitLastErr(t, insp, info)
	if !strings.Contains(lastErr, "lock nodes unreachable") || strings.Contains(lastErr, "busy") {
		t.Fatalf("task's last error %q, want it to say the lock nodes are unreachable", lastErr)
	}
}

// waitLastErr waits until the task has a last error and returns it.
func waitLastErr(t *testing.T, insp *asynq.Inspector, info *asynq.TaskInfo) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ti, err := insp.GetTaskInfo(info.Queue, info.ID)
		if err == nil && ti.LastErr != "" {
			return ti.LastErr
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s has no last error after 30s (%v)", info.ID, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOpsBrokerDownIsNamed: a broker that does not answer from the start is
// named at Warn and in /readyz, and the worker keeps probing.
func TestOpsBrokerDownIsNamed(t *testing.T) {
	dead := redistest.ClosedAddr(t)
	o := newOpsWorker(t, opsVars("redis://:broker-Secret-6@"+dead+"/1", redistest.StartCluster(t, 3).URLs(), nil))
	o.run(t)
	o.waitRecord(t, "WARN", "broker unreachable", map[string]string{"addr": dead, "err": "refused"}, 30*time.Second)
	o.waitRecord(t, "WARN", "worker not ready", map[string]string{"why": "broker " + dead + " unreachable"}, 30*time.Second)
	body := o.waitReadyzBody(t, 503, 30*time.Second, "not ready: broker "+dead+" unreachable")
	if strings.Contains(body, "lock") {
		t.Fatalf("/readyz blames the lock nodes too: %q", body)
	}
	noSecret(t, "the log", o.logs.String(), "broker-Secret-6")
}
