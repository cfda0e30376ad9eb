package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// TestStartLinesInOrderAndNothingPerTask: at Info the worker says it
// started, then that it is ready, and nothing per task: forty tasks on
// distinct keys add no line between "worker ready" and "worker shutting
// down".
func TestStartLinesInOrderAndNothingPerTask(t *testing.T) {
	f := newFixture(t)
	f.cfg.LogFormat, f.cfg.LogLevel = "json", "info"
	var out workertest.Buffer
	w, err := New(f.cfg, WithLogger(newLogger(f.cfg, &out)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 64)
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		done <- struct{}{}
		return nil
	}), middleware.ByField("sku"))
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, w)
	const tasks = 40
	for i := range tasks {
		if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", fmt.Appendf(nil, `{"sku":"sku-%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	for range tasks {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("tasks not processed")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, r := range logLines(t, out.String()) {
		if r["component"] == nil { // the worker's own lines
			msgs = append(msgs, fmt.Sprint(r["msg"]))
		}
	}
	idx := func(m string) int {
		for i, s := range msgs {
			if s == m {
				return i
			}
		}
		return -1
	}
	started, ready, stopping := idx("worker started"), idx("worker ready"), idx("worker shutting down")
	if started < 0 || ready != started+1 || stopping != ready+1 {
		t.Fatalf("the worker's lines %q: want worker started, worker ready, then nothing until worker shutting down", msgs)
	}
}
