package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
)

// runsByTask counts a handler's runs by task, a copy ("A~r2") counting
// for its task ("A").
type runsByTask struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runsByTask) ProcessTask(ctx context.Context, _ *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	base, _, _ := strings.Cut(id, "~r")
	r.mu.Lock()
	r.n[base]++
	r.mu.Unlock()
	return nil
}

func (r *runsByTask) get(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// waitUntil polls cond every 20ms for up to limit and reports whether it
// held.
func waitUntil(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// TestProofRerunWithFinishedCopy (issue 20, suspicions 4 and 5), on a real
// broker and 3 real lock nodes: tasks A and B, archived, are run again by an
// operator while their resource is busy, on their last retry. Each has a
// copy from an earlier run under the derived ID: A's completed and kept,
// B's archived. Each re-run must be resubmitted under a new ID and run once
// (before the fix, the conflict on the old ID passed for "stored": the re-run
// was revoked and nothing ran). The new copy, once completed, must read as
// completed, not "not found" (what a run whose resubmission failed looks for
// before it runs itself; the late interleaving is forced in
// middleware/resubmit_test.go).
func TestProofRerunWithFinishedCopy(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	broker := redistest.StartNode(t)
	locks := lockClient(t, nodes, redlock.WithNodeTimeout(time.Second))
	runs := &runsByTask{n: map[string]int{}}
	// Records off: the copy mechanism alone is under test here; with
	// records the re-run of a task whose copy completed completes without
	// running (TestOnceAcrossABrokerOutage).
	h := middleware.Lock(locks, middleware.ByType(), middleware.WithPolicy(middleware.Requeue()),
		middleware.WithBroker(brokerClient(t, broker)), middleware.WithCompletionWindow(0))(runs)
	startServer(t, broker, serverConfig(4), h)
	cl, insp := asynqClient(t, broker), inspector(t, broker)
	earlierRuns(t, cl, insp, runs)

	gone := rerunWhileBusy(t, locks, insp, "A", "B")
	ran := gone && waitUntil(time.Minute, func() bool { return runs.get("A") == 2 && runs.get("B") == 1 })
	waitQueueEmpty(t, insp, time.Minute)
	lost := max(2-runs.get("A"), 0) + max(1-runs.get("B"), 0)
	dup := max(runs.get("A")-2, 0) + max(runs.get("B")-1, 0)
	report.Add(Row{
		Scenario: "middleware with broker: 2 archived tasks run again by an operator on their last retry, resource busy, 3 nodes",
		Fault:    "each task's copy from an earlier run still under the derived ID (one completed and kept, one archived)",
		Ops:      2, Lost: lost, Duplicated: dup,
		Notes: fmt.Sprintf("re-runs revoked as parked copies: %v; A ran %d times (its earlier copy, then the re-run; want 2), B %d (want 1); before the fix neither re-run ran", gone, runs.get("A"), runs.get("B")),
	})
	if !ran || lost+dup > 0 {
		t.Fatalf("originals parked %v; A ran %d times (want 2: the earlier copy and the re-run), B %d (want 1)", gone, runs.get("A"), runs.get("B"))
	}
	keptAsCompleted(t, insp)
}

// rerunWhileBusy runs the archived tasks ids again, as an operator would,
// while their resource (of ByType, task type "job") is held, and reports
// whether they all left the broker within a minute (resubmitted as copies
// and revoked); then it releases the resource.
func rerunWhileBusy(t *testing.T, locks *redlock.Client, insp *asynq.Inspector, ids ...string) bool {
	t.Helper()
	ctx := within(t, 2*time.Minute)
	held, err := locks.Acquire(ctx, "task:job:job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	for _, id := range ids {
		if err := insp.RunTask("default", id); err != nil {
			t.Fatal(err)
		}
	}
	return waitUntil(time.Minute, func() bool {
		for _, id := range ids {
			if !absent(insp, id) {
				return false
			}
		}
		return true
	})
}

// earlierRuns leaves what earlier runs of A and B left behind: A's copy
// A~r1 ran and completed (kept by its retention), B's copy B~r1 archived,
// and both originals archived.
func earlierRuns(t *testing.T, cl *asynq.Client, insp *asynq.Inspector, runs *runsByTask) {
	t.Helper()
	if _, err := cl.Enqueue(asynq.NewTask("job", nil), asynq.TaskID("A~r1"), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(time.Minute, func() bool { return state(insp, "A~r1") == asynq.TaskStateCompleted }) || runs.get("A") != 1 {
		t.Fatalf("A~r1 not completed once (runs %d)", runs.get("A"))
	}
	for _, id := range []string{"B~r1", "A", "B"} {
		if _, err := cl.Enqueue(asynq.NewTask("job", nil), asynq.TaskID(id), asynq.MaxRetry(0), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := insp.ArchiveTask("default", id); err != nil {
			t.Fatal(err)
		}
	}
}

// keptAsCompleted: the re-run's copy of A, resubmitted without a retention
// of its own, reads as completed after it ran.
func keptAsCompleted(t *testing.T, insp *asynq.Inspector) {
	t.Helper()
	ti, err := insp.GetTaskInfo("default", "A~r2")
	kept := err == nil && ti.State == asynq.TaskStateCompleted
	report.Add(Row{
		Scenario: "middleware with broker: a busy task's copy resubmitted on its last retry, run to completion, 3 nodes",
		Fault:    "the run that resubmitted it looks it up after it completed (as after a failed resubmission whose copy landed late)",
		Ops:      1, Duplicated: map[bool]int{true: 0, false: 1}[kept],
		Notes: fmt.Sprintf("lookup of the completed copy: %v (err %v); \"not found\" would pass for never stored and the run would apply the task again", stateOf(ti), err),
	})
	if !kept {
		t.Fatalf("completed copy A~r2: %v, %v; want it kept as completed", stateOf(ti), err)
	}
}

func absent(insp *asynq.Inspector, id string) bool {
	_, err := insp.GetTaskInfo("default", id)
	return err != nil && strings.Contains(err.Error(), asynq.ErrTaskNotFound.Error())
}

func state(insp *asynq.Inspector, id string) asynq.TaskState {
	ti, err := insp.GetTaskInfo("default", id)
	if err != nil {
		return 0
	}
	return ti.State
}

func stateOf(ti *asynq.TaskInfo) string {
	if ti == nil {
		return "none"
	}
	return ti.State.String()
}
