package worker

import (
	"context"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The span of one task (TraceTasks), and its attributes.
const (
	spanTask        = "asynq.task"
	attrSystem      = attribute.Key("messaging.system")
	attrOperation   = attribute.Key("messaging.operation.type")
	attrTaskType    = attribute.Key("asynq.task.type")
	attrTaskID      = attribute.Key("asynq.task.id")
	attrQueue       = attribute.Key("asynq.queue")
	attrRetryCount  = attribute.Key("asynq.task.retry_count")
	attrMaxRetry    = attribute.Key("asynq.task.max_retry")
	attrTaskOutcome = attribute.Key("asynq.task.outcome")
)

// taskTracerName is the instrumentation scope of the task spans.
const taskTracerName = "github.com/asynqlock/asynqlock/worker"

// TraceTasks returns a middleware that records a span asynq.task around
// every task, a child of the span in the task's context: put it first
// (mux.Use(worker.TraceTasks(tp), middleware.Lock(...))) so that the
// lock's spans and the handler's own are its children. Its attributes are
// messaging.system=asynq, messaging.operation.type=process,
// asynq.task.type, asynq.task.id, asynq.queue, asynq.task.retry_count,
// asynq.task.max_retry and asynq.task.outcome: ok, failed (with an error
// status and the error recorded) or conflict (requeued or parked for a busy
// lock, retried without consuming a retry: no error). A handler that
// panics leaves an error status. Default (tp nil): the global provider
// (otel.GetTracerProvider()); while the application has set none, no span
// is started and a task pays one comparison.
func TraceTasks(tp trace.TracerProvider) asynq.MiddlewareFunc {
	var fixed trace.Tracer
	if tp != nil {
		fixed = tp.Tracer(taskTracerName)
	}
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			tr := fixed
			if tr == nil {
				if g := otel.GetTracerProvider(); g != unsetGlobal {
					tr = g.Tracer(taskTracerName)
				}
			}
			if tr == nil {
				return next.ProcessTask(ctx, t)
			}
			return traceTask(ctx, tr, t, next)
		})
	}
}

// traceTask runs one task in its span.
func traceTask(ctx context.Context, tr trace.Tracer, t *asynq.Task, next asynq.Handler) error {
	ctx, span := tr.Start(ctx, spanTask, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(taskAttrs(ctx, t)...))
	returned := false
	defer func() {
		if !returned {
			span.SetStatus(codes.Error, "handler panicked")
		}
		span.End()
	}()
	err := next.ProcessTask(ctx, t)
	returned = true
	endTaskSpan(span, err)
	return err
}

// taskAttrs are the attributes of a task's span.
func taskAttrs(ctx context.Context, t *asynq.Task) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attrSystem.String("asynq"), attrOperation.String("process"), attrTaskType.String(t.Type())}
	if id, ok := asynq.GetTaskID(ctx); ok {
		attrs = append(attrs, attrTaskID.String(id))
	}
	if q, ok := asynq.GetQueueName(ctx); ok {
		attrs = append(attrs, attrQueue.String(q))
	}
	if n, ok := asynq.GetRetryCount(ctx); ok {
		attrs = append(attrs, attrRetryCount.Int(n))
	}
	if n, ok := asynq.GetMaxRetry(ctx); ok {
		attrs = append(attrs, attrMaxRetry.Int(n))
	}
	return attrs
}

// endTaskSpan records how the task ended.
func endTaskSpan(span trace.Span, err error) {
	switch {
	case err == nil:
		span.SetAttributes(attrTaskOutcome.String("ok"))
	case !middleware.IsFailure(err):
		span.SetAttributes(attrTaskOutcome.String("conflict"))
	default:
		span.SetAttributes(attrTaskOutcome.String("failed"))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
