package middleware

import (
	"cmp"
	"context"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the middleware's spans.
const tracerName = "github.com/asynqlock/asynqlock/middleware"

// The wait span, the events on the task's span, and their attributes
// (docs/guide/MIDDLEWARE.md, "Tracing").
const (
	spanWait      = "asynqlock.wait"
	eventParked   = "asynqlock.parked"
	eventLost     = "asynqlock.lost"
	eventSkipped  = "asynqlock.redelivery_skipped"
	eventRollback = "asynqlock.rollback"

	attrResource = attribute.Key("asynqlock.resource")
	attrReason   = attribute.Key("asynqlock.reason")
	attrOutcome  = attribute.Key("asynqlock.outcome")
	attrRounds   = attribute.Key("asynqlock.rounds")
	attrPosition = attribute.Key("asynqlock.position")
	attrBackstop = attribute.Key("asynqlock.backstop_ms")
	attrCause    = attribute.Key("asynqlock.cause")
	attrError    = attribute.Key("asynqlock.error")
)

// WithTracerProvider sets the OpenTelemetry provider of the middleware's own
// span, asynqlock.wait (a task's wait for its busy lock); its events go to
// the task's span, and the lock client's spans to redlock.WithTracerProvider's
// provider (docs/guide/MIDDLEWARE.md, "Tracing"). Default (and nil):
// otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

func (c *config) tracer() trace.Tracer {
	return cmp.Or(c.tracerProvider, otel.GetTracerProvider()).Tracer(tracerName)
}

// taskEvent adds an event to the span of the task's context, if it records.
func taskEvent(ctx context.Context, name string, attrs ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// traceRollback notes the rollback hook's run (err: its error) on the task's span.
func traceRollback(ctx context.Context, res string, lost bool, cause, err error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	reason, outcome := "handler_error", "ok"
	if lost {
		reason = "lock_lost"
	}
	attrs := []attribute.KeyValue{attrResource.String(res), attrReason.String(reason),
		attrCause.String(cause.Error())}
	if err != nil {
		outcome, attrs = "failed", append(attrs, attrError.String(err.Error()))
	}
	taskEvent(ctx, eventRollback, append(attrs, attrOutcome.String(outcome))...)
}

// traceLost notes on the task's span the loss of its lock, and why.
func traceLost(ctx context.Context, res string, lost error) {
	if lost != nil {
		taskEvent(ctx, eventLost, attrResource.String(res), attrReason.String(lost.Error()))
	}
}
