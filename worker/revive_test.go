package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// TestWorkerRevivesTasksLeftParkedInTheArchive: a task parked on its last
// retry whose parker stopped (archived with a park's last error) is moved
// back by the workers' sweep and runs once, with two workers sweeping at
// once; a task archived by a failure stays archived. Control: a second move
// of the completed task runs it again, so the count could show a double
// move.
func TestWorkerRevivesTasksLeftParkedInTheArchive(t *testing.T) {
	every, after := reviveEvery, reviveAfter
	reviveEvery, reviveAfter = 20*time.Millisecond, 0
	t.Cleanup(func() { reviveEvery, reviveAfter = every, after })
	f := newFixture(t)
	opt, err := asynq.ParseRedisURI(f.broker.URL())
	if err != nil {
		t.Fatal(err)
	}
	archive(t, opt)

	var mu sync.Mutex
	runs := map[string]int{}
	for range 2 {
		w, err := New(f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Handle("report", asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			mu.Lock()
			runs[id]++
			mu.Unlock()
			return nil
		}), middleware.ByField("sku"))
		if err != nil {
			t.Fatal(err)
		}
		start(t, w)
	}
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = insp.Close() })
	waitState(t, insp, "parked", asynq.TaskStateCompleted)
	time.Sleep(time.Second) // 50 sweeps of each worker: a double move would run it again
	mu.Lock()
	got := runs["parked"]
	mu.Unlock()
	if got != 1 || runs["failed"] != 0 {
		t.Fatalf("runs %v: want the parked task once, the failed one never", runs)
	}
	if info, err := insp.GetTaskInfo("default", "failed"); err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("the failed task: %+v, %v; want it left archived", info, err)
	}
	if err := insp.RunTask("default", "parked"); err != nil { // the control
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for mu.Lock(); runs["parked"] != 2; mu.Lock() {
		mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("control: a second move of the completed task did not run it again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Unlock()
}

// archive leaves two tasks in the archive through a plain asynq server: one
// as a park on its last retry leaves it, one failed.
func archive(t *testing.T, opt asynq.RedisConnOpt) {
	t.Helper()
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("report", func(ctx context.Context, _ *asynq.Task) error {
		if id, _ := asynq.GetTaskID(ctx); id == "parked" {
			return errors.New("middleware: resource busy, task requeued (parked p1): report:A: redlock: resource locked")
		}
		return errors.New("disk full")
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	c := asynq.NewClient(opt)
	defer c.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	b, _ := json.Marshal(map[string]any{"sku": "A"})
	for _, id := range []string{"parked", "failed"} {
		if _, err := c.Enqueue(asynq.NewTask("report", b), asynq.TaskID(id), asynq.MaxRetry(0), asynq.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"parked", "failed"} {
		waitState(t, insp, id, asynq.TaskStateArchived)
	}
	srv.Shutdown()
}

// waitState waits (bounded) until task id of the default queue is in state.
func waitState(t *testing.T, insp *asynq.Inspector, id string, state asynq.TaskState) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := insp.GetTaskInfo("default", id)
		if err == nil && info.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: %+v, %v; want %v", id, info, err, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
