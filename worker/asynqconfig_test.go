package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// TestAsynqConfigRefusesTheWorkersFields: an application's asynq settings
// that set what the worker takes from its environment are refused at New,
// each naming the variable to set instead, and so is a setting asynq would
// panic on when the worker runs.
func TestAsynqConfigRefusesTheWorkersFields(t *testing.T) {
	f := newFixture(t)
	_, err := New(f.cfg, quiet(), WithAsynqConfig(asynq.Config{Concurrency: 3, Queues: map[string]int{"a": 1}, GroupGracePeriod: time.Millisecond}))
	for _, want := range []string{"WORKER_CONCURRENCY", "WORKER_QUEUES", "GroupGracePeriod is 1ms"} {
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("New gave %v, want ErrConfig naming %s", err, want)
		}
	}
}

// TestAsynqConfigChainsAfterTheMiddleware: a conflict keeps the
// middleware's short delay and is no failure whatever the application
// says; every other error gets the application's delay and failure rule.
func TestAsynqConfigChainsAfterTheMiddleware(t *testing.T) {
	appErr := errors.New("payment declined")
	delay := chainRetryDelay(func(int, error, *asynq.Task) time.Duration { return 42 * time.Second })
	failure := chainIsFailure(func(err error) bool { return !errors.Is(err, appErr) })
	conflict := fmt.Errorf("busy: %w", conflictErr(t))
	tk := asynq.NewTask("stock:adjust", nil)
	if d := delay(1, conflict, tk); d >= 42*time.Second {
		t.Errorf("a conflict waits %v, the application's delay: want the middleware's", d)
	}
	if d := delay(1, errors.New("boom"), tk); d != 42*time.Second {
		t.Errorf("an error waits %v, want the application's 42s", d)
	}
	if failure(conflict) || failure(appErr) || !failure(errors.New("boom")) {
		t.Errorf("IsFailure: conflict %v, the application's non-failure %v, another error %v; want false, false, true",
			failure(conflict), failure(appErr), failure(errors.New("boom")))
	}
}

// TestAsynqConfigAggregatesOnTheAppsMux: an application using asynq's task
// aggregation and its own mux keeps both under the worker: grouped tasks
// reach its aggregated handler on its mux, its ErrorHandler sees a failing
// task, and a locked handler registered with Handle runs beside them.
func TestAsynqConfigAggregatesOnTheAppsMux(t *testing.T) {
	f := newFixture(t)
	mux := asynq.NewServeMux()
	batched := make(chan int, 1)
	mux.HandleFunc("report:batch", func(_ context.Context, t *asynq.Task) error {
		batched <- len(strings.Split(string(t.Payload()), ","))
		return nil
	})
	mux.HandleFunc("report:bad", func(context.Context, *asynq.Task) error { return fmt.Errorf("bad report: %w", asynq.SkipRetry) })
	var handled atomic.Int32
	w, err := New(f.cfg, quiet(), WithServeMux(mux), WithAsynqConfig(asynq.Config{
		GroupAggregator: asynq.GroupAggregatorFunc(func(group string, ts []*asynq.Task) *asynq.Task {
			parts := make([]string, len(ts))
			for i, t := range ts {
				parts[i] = string(t.Payload())
			}
			return asynq.NewTask("report:batch", []byte(strings.Join(parts, ",")))
		}),
		GroupGracePeriod: time.Second,
		ErrorHandler: asynq.ErrorHandlerFunc(func(_ context.Context, t *asynq.Task, _ error) {
			if t.Type() == "report:bad" {
				handled.Add(1)
			}
		}),
	}))
	if err != nil {
		t.Fatal(err)
	}
	locked := make(chan string, 1)
	if err := w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		li, _ := middleware.LockFromContext(ctx)
		locked <- li.Resource
		return nil
	}), middleware.ByField("sku")); err != nil {
		t.Fatal(err)
	}
	start(t, w)
	for i := range 3 {
		if _, err := w.Client().Enqueue(asynq.NewTask("report:row", []byte(fmt.Sprint(i))), asynq.Group("daily")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tk := range []*asynq.Task{asynq.NewTask("report:bad", nil), asynq.NewTask("stock:adjust", []byte(`{"sku":"A"}`))} {
		if _, err := w.Client().Enqueue(tk); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case n := <-batched:
		if n != 3 {
			t.Fatalf("the aggregated task held %d rows, want 3", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no aggregated task reached the application's mux within 30s")
	}
	select {
	case res := <-locked:
		if res != "task:stock:adjust:A" {
			t.Fatalf("the locked handler ran under %q", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the locked handler did not run within 30s")
	}
	until(t, "the application's ErrorHandler seeing the failed task", func() bool { return handled.Load() == 1 })
}
