package worker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlocktest/embedded"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// crashChildEnv holds the broker and lock node URLs when the test binary runs
// as the worker TestCrashedWorkersTaskComesBackSoon kills.
const crashChildEnv = "ASYNQLOCK_CRASH_CHILD"

// crashWorker builds a worker.New worker (which wires middleware.RetryDelay)
// on the given servers, running "crash:task" under a lock on its "sku".
func crashWorker(t testing.TB, broker, nodes string, h asynq.HandlerFunc) *worker.Worker {
	cfg, err := worker.LoadConfigFrom(map[string]string{
		"ASYNQ_REDIS_URL": broker, "REDLOCK_NODES": nodes, "METRICS_ADDR": "",
		"REDLOCK_NODE_TIMEOUT": "1s", "WORKER_READINESS_INTERVAL": "5s", // embedded nodes on a loaded machine
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(cfg, worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("crash:task", h, middleware.ByField("sku")); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestCrashedWorkerChild is the worker that gets killed: it takes the task,
// says so on stdout and works on it until SIGKILL. It runs only as the child
// of TestCrashedWorkersTaskComesBackSoon.
func TestCrashedWorkerChild(t *testing.T) {
	urls := os.Getenv(crashChildEnv)
	if urls == "" {
		t.Skip("the child process of TestCrashedWorkersTaskComesBackSoon")
	}
	broker, nodes, _ := strings.Cut(urls, " ")
	w := crashWorker(t, broker, nodes, func(ctx context.Context, task *asynq.Task) error {
		fmt.Printf("started %s\n", task.ResultWriter().TaskID())
		<-ctx.Done()
		return ctx.Err()
	})
	_ = w.Run(context.Background())
}

// TestCrashedWorkersTaskComesBackSoon kills a worker process (SIGKILL) in
// the middle of a task and checks the way back: asynq's recoverer finds the
// task once its lease (30s) has been expired for 30s, and RetryDelay gives it
// back within a second, where asynq's default delay was 15s at least. The
// survivor is started when the task has become recoverable, so that its
// recoverer (at start, then once a minute) finds it at once: the test
// measures RetryDelay's part, not the recoverer's phase. The bound is the old
// minimum itself, 15s, against a second expected.
func TestCrashedWorkersTaskComesBackSoon(t *testing.T) {
	if testing.Short() {
		t.Skip("waits about a minute for asynq's lease and recoverer")
	}
	urls, stop, err := embedded.StartN(4)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	broker, nodes := urls[0], strings.Join(urls[1:], ",")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashedWorkerChild$", "-test.v")
	child.Env = append(os.Environ(), crashChildEnv+"="+broker+" "+nodes)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()

	opt, err := asynq.ParseRedisURI(broker)
	if err != nil {
		t.Fatal(err)
	}
	enq := asynq.NewClient(opt)
	defer enq.Close()
	info, err := enq.EnqueueContext(ctx, asynq.NewTask("crash:task", []byte(`{"sku":"A-1"}`)), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "started "); ok {
				started <- id
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case id := <-started:
		if id != info.ID {
			t.Fatalf("the child started task %s, want %s", id, info.ID)
		}
	case <-ctx.Done():
		t.Fatal("the child did not start the task")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = child.Wait()

	// The lease the dead worker left: asynq's recoverer takes it 30s after it
	// expired (asynq v0.26 recoverer.go, cutoff now-30s).
	bc := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(broker, "redis://")})
	defer bc.Close()
	lease, err := bc.ZScore(ctx, "asynq:{default}:lease", info.ID).Result()
	if err != nil {
		t.Fatalf("lease of %s: %v", info.ID, err)
	}
	recoverable := time.Unix(int64(lease), 0).Add(30*time.Second + time.Second)
	select {
	case <-time.After(time.Until(recoverable)):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}

	done := make(chan struct{}, 1)
	w := crashWorker(t, broker, nodes, func(context.Context, *asynq.Task) error {
		done <- struct{}{}
		return nil
	})
	wctx, wcancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	defer func() { wcancel(); <-ran }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the crashed worker's task did not come back within 5 minutes")
	}
	back := time.Since(killed)

	insp := asynq.NewInspector(opt)
	defer insp.Close()
	var ti *asynq.TaskInfo
	for range 600 { // the completion is written just after the handler returns
		if ti, err = insp.GetTaskInfo("default", info.ID); err == nil && ti.State == asynq.TaskStateCompleted {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ti == nil || ti.State != asynq.TaskStateCompleted {
		t.Fatalf("task info %+v, %v: want completed", ti, err)
	}
	if !strings.Contains(ti.LastErr, asynq.ErrLeaseExpired.Error()) || ti.Retried != 1 {
		t.Fatalf("last error %q after %d retries: want one recovery from an expired lease", ti.LastErr, ti.Retried)
	}
	// LastFailedAt is when the recoverer gave the task back (whole seconds).
	if d := ti.CompletedAt.Sub(ti.LastFailedAt); d >= 15*time.Second {
		t.Errorf("recovered at %v, completed %v later: RetryDelay should bring it back within a second, asynq's default took 15s at least",
			ti.LastFailedAt, d)
	}
	t.Logf("killed mid-task; lease expired %v later, task back and done %v after the kill (recovered to done: %v)",
		time.Unix(int64(lease), 0).Sub(killed).Round(time.Second), back.Round(time.Second), ti.CompletedAt.Sub(ti.LastFailedAt))
}
