package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/checker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestProofWorkerCrashHotSKU: worker processes built by worker.New (parking
// on) serve 40 tasks on one hot SKU. Worker A serves alone first, so that it
// holds the hot SKU, has tasks waiting for it and has parked others in the
// broker; then A is SIGKILLed while a task of it is inside its critical
// section and tasks are parked. Worker B serves from the kill on; C starts
// once asynq can reclaim A's orphaned tasks (see reclaimOrphans). Nothing is
// lost, nothing applied twice, the stock is exact, nothing is archived, and
// the parked tasks came back (by promotion or their backstop) without A.
// Like TestProofWorkerCrash, it waits about a minute for asynq's lease and
// recoverer, asleep on servers and processes of its own, so it runs in
// parallel with the other parallel tests.
func TestProofWorkerCrashHotSKU(t *testing.T) {
	t.Parallel()
	const nTasks = 40
	env := startProofEnv(t)
	insp := inspector(t, env.store)
	client := asynqClient(t, env.store)
	ids := make([]string, nTasks)
	var want int64
	for i := range ids {
		a := adjustment{ID: i, SKU: "HOT", Delta: int64(i%5 + 1)}
		want += a.Delta
		ids[i] = fmt.Sprintf("hot-%02d", i)
		b, _ := json.Marshal(a)
		if _, err := client.Enqueue(asynq.NewTask(taskType, b), asynq.TaskID(ids[i])); err != nil {
			t.Fatal(err)
		}
	}
	procs, trace, followed := launchTaskWorkers(t, env, [2]time.Duration{30 * time.Millisecond, 50 * time.Millisecond})
	a, b, c := procs[0], procs[1], procs[2]
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Kill A while one of its tasks is in its section and tasks are parked.
	fifo := "asynq:{default}:asynqlock:park:task:" + taskType + ":HOT"
	ctx := context.Background()
	must(a.send("go"))
	deadline := time.Now().Add(20 * time.Second)
	var parked int64
	for {
		pre, post := trace.inSection("A")
		parked, _ = env.client.LLen(ctx, fifo).Result()
		if pre+post >= 1 && parked >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker A never held the hot SKU with 3 tasks parked (in section %d, parked %d)", pre+post, parked)
		}
		time.Sleep(2 * time.Millisecond)
	}
	must(a.cmd.Process.Kill())
	<-a.done
	killed := stamp()
	killedAt := time.Now()
	<-followed[0]
	active, err := insp.ListActiveTasks("default", asynq.PageSize(100))
	must(err)
	orphans := map[string]bool{}
	for _, ti := range active {
		orphans[ti.ID] = true
	}
	must(b.send("go"))
	cut := trace.kill("A", killed, markers(t, env, ids))
	t.Logf("A killed holding the hot SKU (%d task in its section), %d of its tasks active in asynq, %d parked", len(cut), len(orphans), parked)

	_, _, _ = reclaimOrphans(t, insp, orphans, killedAt, c)
	deadline = time.Now().Add(60 * time.Second)
	for len(markers(t, env, ids)) < len(ids) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks applied 60s after A's tasks were reclaimed", len(markers(t, env, ids)), len(ids))
		}
		time.Sleep(50 * time.Millisecond)
	}
	qi := waitQueueEmpty(t, insp, 30*time.Second)
	for i, p := range []*workerProc{b, c} {
		must(p.send("stop"))
		_, err := p.wait(30 * time.Second)
		must(err)
		<-followed[i+1]
	}

	logged, err := env.client.LRange(ctx, env.prefix+logKey, 0, -1).Result()
	must(err)
	perTask := map[string]int{}
	for _, id := range logged {
		perTask[id]++
	}
	for _, id := range ids {
		if perTask[id] != 1 {
			t.Fatalf("task %s applied %d times (log %v)", id, perTask[id], perTask)
		}
	}
	v, err := env.client.Get(ctx, env.prefix+stockKey+"HOT").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if got, _ := strconv.ParseInt(v, 10, 64); got != want {
		t.Fatalf("hot stock %d, want %d", got, want)
	}
	if qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	h := trace.history()
	h.Final = map[string]string{"HOT": v}
	h.Events = []checker.Event{{At: killed, What: "SIGKILL worker A"}}
	if r := checker.Check(h); !r.OK() {
		t.Fatalf("checker: %s; first violation: %s; evidence in %s", r, r.Violations[0].Detail, keepEvidence(t, h, r))
	}
}
