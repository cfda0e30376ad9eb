package redlock

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The instrumentation scope, span names and attribute keys
// (docs/guide/MIDDLEWARE.md, "Tracing", lists them with their values).
const (
	tracerName   = "github.com/asynqlock/asynqlock/redlock"
	spanAcquire  = "asynqlock.acquire"
	spanRelease  = "asynqlock.release"
	attrResource = attribute.Key("asynqlock.resource")
	attrOutcome  = attribute.Key("asynqlock.outcome")
	attrAttempts = attribute.Key("asynqlock.attempts")
	attrFence    = attribute.Key("asynqlock.fence")
	attrHandover = attribute.Key("asynqlock.handover")
)

// How a lock came to its holder: the asynqlock.handover attribute.
const (
	handoverNone   = "none"   // its own first round, the uncontended path
	handoverLocal  = "local"  // handed over by a holder of this Client
	handoverRemote = "remote" // won after queueing on the nodes
)

// WithTracerProvider sets the OpenTelemetry provider of the spans
// asynqlock.acquire (every TryAcquire and Acquire) and asynqlock.release,
// children of the span in the caller's context. Default:
// otel.GetTracerProvider(), the global provider, which records nothing until
// the application installs one; nil means the default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

var (
	// unsetGlobal is the global provider before an application sets one: it
	// records nothing, yet a span started on it allocates, so the untraced
	// common path skips it.
	unsetGlobal = otel.GetTracerProvider()
	noSpan      = trace.SpanFromContext(context.Background()) // startSpan's when nothing would record
)

// tracers caches the tracer of the provider in use.
type tracers struct {
	fixed trace.Tracer // from WithTracerProvider, nil for the global provider
	cur   atomic.Pointer[tracerOf]
}

type tracerOf struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

// get returns the tracer to use now, nil when no provider is set.
func (ts *tracers) get() trace.Tracer {
	if ts.fixed != nil {
		return ts.fixed
	}
	tp := otel.GetTracerProvider()
	if tp == unsetGlobal {
		return nil
	}
	if cur := ts.cur.Load(); cur != nil && cur.tp == tp {
		return cur.t
	}
	t := tp.Tracer(tracerName)
	ts.cur.Store(&tracerOf{tp: tp, t: t})
	return t
}

// startSpan starts one of the client's spans as a child of ctx's span
// (nothing below records spans of its own).
func (c *Client) startSpan(ctx context.Context, name, resource string) trace.Span {
	t := c.tracer.get()
	if t == nil {
		return noSpan
	}
	_, span := t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attrResource.String(resource))
	}
	return span
}

// endAcquireSpan records an acquisition's outcome and ends its span.
func endAcquireSpan(span trace.Span, l *Lock, attempts int, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(outcomeOf(err)), attrAttempts.Int(attempts))
		if l != nil {
			span.SetAttributes(attrHandover.String(l.via))
			if l.fence != 0 {
				span.SetAttributes(attrFence.Int64(l.fence))
			}
		}
		if err != nil && !errors.Is(err, ErrLocked) {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// endReleaseSpan records a release's outcome and ends its span.
func endReleaseSpan(span trace.Span, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(releaseOutcome(err)))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// releaseOutcome names a release's result for asynqlock.outcome.
func releaseOutcome(err error) string {
	switch {
	case err == nil:
		return "released"
	case errors.Is(err, ErrLockLost):
		return "lost"
	case errors.Is(err, ErrNotHeld):
		return "not_held"
	case errors.Is(err, ErrQuorum):
		return "quorum"
	}
	return "error"
}
