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

// traceScope is the instrumentation scope of the worker's spans.
const traceScope = "github.com/asynqlock/asynqlock/worker"

// The span of one task the worker runs, and its attributes.
const (
	spanTask          = "asynq.task"
	attrSystem        = attribute.Key("messaging.system")
	attrOperation     = attribute.Key("messaging.operation.type")
	attrTaskType      = attribute.Key("asynq.task.type")
	attrTaskID        = attribute.Key("asynq.task.id")
	attrQueue         = attribute.Key("asynq.queue")
	attrRetryCount    = attribute.Key("asynq.task.retry_count")
	attrMaxRetry      = attribute.Key("asynq.task.max_retry")
	attrTaskOutcome   = attribute.Key("asynq.task.outcome")
	outcomeOK         = "ok"
	outcomeFailed     = "failed"
	outcomeConflicted = "conflict" // requeued or parked: retried without consuming a retry
)

// taskTracer returns the tracer of the task spans: the worker's own
// provider's, else the global provider's once the application set one, else
// nil (nothing records: a task pays a pointer comparison).
func (w *Worker) taskTracer() trace.Tracer {
	if w.tracer != nil {
		return w.tracer
	}
	tp := otel.GetTracerProvider()
	if tp == unsetGlobal {
		return nil
	}
	return tp.Tracer(traceScope)
}

// traceTasks records a span asynq.task around every task h runs, the parent
// of the lock's spans and of the handler's own: type, ID, queue and retry
// count as attributes, an error status when the task failed (a conflict,
// retried without consuming a retry, is no failure).
func (w *Worker) traceTasks(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		tr := w.taskTracer()
		if tr == nil {
			return h.ProcessTask(ctx, t)
		}
		ctx, span := tr.Start(ctx, spanTask, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(taskAttrs(ctx, t)...))
		returned := false
		defer func() {
			if !returned {
				span.SetStatus(codes.Error, "handler panicked")
			}
			span.End()
		}()
		err := h.ProcessTask(ctx, t)
		returned = true
		endTaskSpan(span, err)
		return err
	})
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
		span.SetAttributes(attrTaskOutcome.String(outcomeOK))
	case !middleware.IsFailure(err):
		span.SetAttributes(attrTaskOutcome.String(outcomeConflicted))
	default:
		span.SetAttributes(attrTaskOutcome.String(outcomeFailed))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
