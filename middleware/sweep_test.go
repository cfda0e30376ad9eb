package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestBareMiddlewareRevivesTasksLeftParkedInTheArchive: a task parked on
// its last retry whose parker stopped (archived with a park's last error)
// is moved back by the sweep of a bare middleware with WithBroker (no
// worker.New) once it has run a task of the queue, and runs once, with two
// servers (two broker clients) sweeping at once; a task archived by a
// failure stays archived. Controls: without WithBroker (no sweep) the task
// stays archived through the same runs; a second move of the completed
// task runs it again, so the count could show a double move. Each sweep
// then stops: its broker client closed, or no task of its queue for
// sweepIdle.
func TestBareMiddlewareRevivesTasksLeftParkedInTheArchive(t *testing.T) {
	every, after, idle := sweepEvery, sweepAfter, sweepIdle
	sweepEvery, sweepAfter, sweepIdle = 20*time.Millisecond, 0, 2*time.Second
	t.Cleanup(func() { sweepEvery, sweepAfter, sweepIdle = every, after, idle })
	e := patientEnv(t)
	opt := asynq.RedisClientOpt{Addr: redistest.StartServer(t).Addr()}
	archiveParked(t, opt)
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = insp.Close() })
	var rs runsByServer

	control := serve(t, opt, &rs, 0, Lock(e.locks, ByField("sku")))
	rs.enqueueUntilEachRan(t, opt, 0)
	time.Sleep(500 * time.Millisecond) // 25 passes of a sweep
	control.Shutdown()
	if info, err := insp.GetTaskInfo("default", "parked"); err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("control, no WithBroker: the parked task %+v, %v; want it left archived", info, err)
	}

	brokers := []*redis.Client{redis.NewClient(&redis.Options{Addr: opt.Addr}), redis.NewClient(&redis.Options{Addr: opt.Addr})}
	for i, b := range brokers {
		srv := serve(t, opt, &rs, i+1, Lock(e.locks, ByField("sku"), WithBroker(b)))
		t.Cleanup(srv.Shutdown)
	}
	rs.enqueueUntilEachRan(t, opt, 1, 2)
	waitTaskState(t, insp, "parked", asynq.TaskStateCompleted)
	time.Sleep(time.Second) // 50 passes of each sweep: a double move would run it again
	if got := rs.of("parked"); got != 1 || rs.of("failed") != 0 {
		t.Fatalf("runs: parked %d, failed %d; want the parked task once, the failed one never", got, rs.of("failed"))
	}
	if info, err := insp.GetTaskInfo("default", "failed"); err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("the failed task: %+v, %v; want it left archived", info, err)
	}
	if err := insp.RunTask("default", "parked"); err != nil { // the control
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "control: a second move of the completed task did not run it again", func() bool { return rs.of("parked") == 2 })

	_ = brokers[0].Close()
	eventually(t, 30*time.Second, "the sweep of a closed broker client did not stop", func() bool { return !sweeping(brokers[0]) })
	eventually(t, 30*time.Second, "the sweep of a queue without tasks did not stop", func() bool { return !sweeping(brokers[1]) })
	_ = brokers[1].Close()
}

// runsByServer counts the runs of each task ID, and which servers ran
// one.
type runsByServer struct {
	mu  sync.Mutex
	ids map[string]int
	srv map[int]bool
}

func (r *runsByServer) ran(server int, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids, r.srv = map[string]int{}, map[int]bool{}
	}
	r.ids[id]++
	r.srv[server] = true
}

func (r *runsByServer) of(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[id]
}

// enqueueUntilEachRan enqueues tasks of fresh SKUs until each of servers
// ran one (bounded).
func (r *runsByServer) enqueueUntilEachRan(t *testing.T, opt asynq.RedisConnOpt, servers ...int) {
	t.Helper()
	c := asynq.NewClient(opt)
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		r.mu.Lock()
		all := true
		for _, s := range servers {
			all = all && r.srv[s]
		}
		r.mu.Unlock()
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers %v did not each run a task within 30s", servers)
		}
		b, _ := json.Marshal(map[string]any{"sku": fmt.Sprintf("cold-%d", i)})
		if _, err := c.Enqueue(asynq.NewTask("report", b)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serve starts an asynq server running "report" tasks through mw, counted
// as server's in rs.
func serve(t *testing.T, opt asynq.RedisConnOpt, rs *runsByServer, server int, mw asynq.MiddlewareFunc) *asynq.Server {
	t.Helper()
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel, IsFailure: IsFailure, RetryDelayFunc: RetryDelay})
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.HandleFunc("report", func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		rs.ran(server, id)
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	return srv
}

// archiveParked leaves two tasks in the archive through a plain asynq
// server: one as a park on its last retry leaves it, one failed.
func archiveParked(t *testing.T, opt asynq.RedisConnOpt) {
	t.Helper()
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("report", func(ctx context.Context, _ *asynq.Task) error {
		if id, _ := asynq.GetTaskID(ctx); id == "parked" {
			return errors.New("middleware: resource busy, task requeued (parked p1): task:report:A: redlock: resource locked")
		}
		return errors.New("disk full")
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
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
		waitTaskState(t, insp, id, asynq.TaskStateArchived)
	}
}

// waitTaskState waits (bounded) until task id of the default queue is in
// state.
func waitTaskState(t *testing.T, insp *asynq.Inspector, id string, state asynq.TaskState) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("task %s not %v", id, state), func() bool {
		info, err := insp.GetTaskInfo("default", id)
		return err == nil && info.State == state
	})
}

// sweeping tells whether a sweep of broker's runs.
func sweeping(broker redis.UniversalClient) bool {
	found := false
	sweeps.Range(func(k, _ any) bool {
		found = found || k.(sweepKey).broker == broker
		return true
	})
	return found
}

// eventually waits (bounded by limit) until cond holds, else fails with
// msg.
func eventually(t *testing.T, limit time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
