package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// taskExporter is a provider recording into an in-memory exporter.
func taskExporter(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// TestTraceTasksStatus: a task's span ends with outcome ok, failed (error
// status, the error recorded) or conflict (no error: retried without
// consuming a retry), and with an error status when the handler panics;
// the handler's context carries the span.
func TestTraceTasksStatus(t *testing.T) {
	tp, exp := taskExporter(t)
	conflict := fmt.Errorf("busy: %w", conflictErr(t))
	for _, tc := range []struct {
		err     error
		outcome string
		status  codes.Code
	}{{nil, "ok", codes.Unset}, {errors.New("boom"), "failed", codes.Error}, {conflict, "conflict", codes.Unset}} {
		exp.Reset()
		var inner bool
		h := TraceTasks(tp)(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			inner = trace.SpanFromContext(ctx).IsRecording()
			return tc.err
		}))
		if err := h.ProcessTask(context.Background(), asynq.NewTask("stock:adjust", nil)); err != tc.err {
			t.Fatalf("the handler's error %v came back as %v", tc.err, err)
		}
		s := exp.GetSpans()
		if len(s) != 1 || s[0].Name != spanTask || s[0].Status.Code != tc.status || !inner {
			t.Fatalf("error %v: spans %+v (in the handler's context: %v), want one %s with status %v", tc.err, s, inner, spanTask, tc.status)
		}
		wantAttr(t, spanTask, s[0].Attributes, attrTaskOutcome, tc.outcome)
		wantAttr(t, spanTask, s[0].Attributes, attrTaskType, "stock:adjust")
		wantAttr(t, spanTask, s[0].Attributes, attrSystem, "asynq")
	}
	exp.Reset()
	h := TraceTasks(tp)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("bad") }))
	func() {
		defer func() { _ = recover() }()
		_ = h.ProcessTask(context.Background(), asynq.NewTask("stock:adjust", nil))
	}()
	if s := exp.GetSpans(); len(s) != 1 || s[0].Status.Code != codes.Error {
		t.Fatalf("a panicking handler's span: %+v", s)
	}
}

// TestTraceTasksGlobalProvider: with no provider given, TraceTasks starts
// no span while the global provider is unset, and records into it once the
// application sets one.
func TestTraceTasksGlobalProvider(t *testing.T) {
	if otel.GetTracerProvider() != unsetGlobal {
		t.Skip("a global tracer provider is already set in this test binary")
	}
	var recording bool
	h := TraceTasks(nil)(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		recording = trace.SpanFromContext(ctx).SpanContext().IsValid()
		return nil
	}))
	task := asynq.NewTask("stock:adjust", nil)
	_ = h.ProcessTask(context.Background(), task)
	if recording {
		t.Fatal("a span was started while no provider is set")
	}
	tp, exp := taskExporter(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	_ = h.ProcessTask(context.Background(), task)
	if s := exp.GetSpans(); !recording || len(s) != 1 || s[0].Name != spanTask {
		t.Fatalf("after the global provider was set: %d spans", len(s))
	}
}

// BenchmarkTraceTasksOff: the cost of TraceTasks(nil) per task while no
// tracer provider is set, against the bare handler (run with -benchmem:
// no allocation).
func BenchmarkTraceTasksOff(b *testing.B) {
	if otel.GetTracerProvider() != unsetGlobal {
		b.Skip("a global tracer provider is set in this test binary")
	}
	bare := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	task, ctx := asynq.NewTask("stock:adjust", nil), context.Background()
	for _, v := range []struct {
		name string
		h    asynq.Handler
	}{{"bare", bare}, {"tracetasks-off", TraceTasks(nil)(bare)}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = v.h.ProcessTask(ctx, task)
			}
		})
	}
}
