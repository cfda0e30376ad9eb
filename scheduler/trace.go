package scheduler

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of this package's spans.
const tracerName = "github.com/asynqlock/asynqlock/scheduler"

// The span of one tick and its attributes.
const (
	spanTick    = "asynqlock.cron.tick"
	attrJob     = attribute.Key("asynqlock.job")
	attrOutcome = attribute.Key("asynqlock.outcome")
	attrTick    = attribute.Key("asynqlock.tick")
	attrLate    = attribute.Key("asynqlock.late")
)

// WithTracerProvider sets the OpenTelemetry provider of the span
// asynqlock.cron.tick, recorded for every tick a replica handles (won, lost
// to another replica, skipped or failed) with the job's name and the
// outcome (the Outcome values). The job's context carries the span, so the
// job's own spans are its children. Default: otel.GetTracerProvider(), the
// global provider, which records nothing until the application installs
// one; nil means the default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// tracer returns the configured provider's tracer.
func (c *config) tracer() trace.Tracer {
	tp := c.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// startTick starts the span of one tick of the job.
func (r *runner) startTick(ev *Event, catchUp bool) {
	_, span := r.tracer.Start(context.Background(), spanTick)
	if span.IsRecording() {
		span.SetAttributes(attrJob.String(r.name), attrTick.String(ev.Tick.UTC().Format("2006-01-02T15:04:05.000Z")))
		if catchUp {
			span.SetAttributes(attrLate.Bool(true))
		}
	}
	ev.span = span
}

// endTick records the tick's outcome on its span and ends it; a late run's
// notice is an event, its own outcome comes after.
func endTick(ev Event) {
	if ev.span == nil {
		return
	}
	if ev.Outcome == OutcomeLate {
		ev.span.AddEvent("asynqlock.cron.late")
		return
	}
	if ev.span.IsRecording() {
		ev.span.SetAttributes(attrOutcome.String(string(ev.Outcome)))
		if ev.Err != nil && (ev.Outcome == OutcomeFailed || ev.Outcome == OutcomeLockError) {
			ev.span.SetStatus(codes.Error, ev.Err.Error())
		}
	}
	ev.span.End()
}

// withSpan is ctx carrying the tick's span, the parent of the job's spans.
func withSpan(ctx context.Context, ev Event) context.Context {
	if ev.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, ev.span)
}
