// Package spantest records spans in memory for tests of what the packages
// trace. It is built on the OpenTelemetry trace API alone, so the root
// module's tests do not bring the SDK into every user's module graph.
package spantest

import (
	"context"
	"crypto/rand"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Recorder is a trace.TracerProvider whose spans all record; it keeps every
// ended span. Safe for concurrent use.
type Recorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	ended []*Span
}

// New returns an empty Recorder.
func New() *Recorder { return &Recorder{} }

// Tracer returns a tracer whose spans r records.
func (r *Recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{r: r} }

// Ended returns the ended spans, in the order they ended.
func (r *Recorder) Ended() []*Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Span(nil), r.ended...)
}

type tracer struct {
	embedded.Tracer
	r *Recorder
}

// Start starts a span, a child of ctx's span context unless it asks for a
// new root: same trace ID, a new span ID.
func (t tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	sc := trace.SpanContextConfig{TraceID: parent.TraceID(), TraceFlags: trace.FlagsSampled}
	if !parent.TraceID().IsValid() {
		_, _ = rand.Read(sc.TraceID[:])
	}
	_, _ = rand.Read(sc.SpanID[:])
	start := cfg.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s := &Span{r: t.r, name: name, sc: trace.NewSpanContext(sc), parent: parent, start: start}
	s.SetAttributes(cfg.Attributes()...)
	return trace.ContextWithSpan(ctx, s), s
}

// Span is a recorded span. Its accessors may be called at any time; the
// trace.Span methods change it until End.
type Span struct {
	embedded.Span
	r          *Recorder
	sc, parent trace.SpanContext

	mu         sync.Mutex
	name       string
	start, end time.Time
	attrs      []attribute.KeyValue
	events     []Event
	code       codes.Code
	desc       string
}

// Event is one event of a span.
type Event struct {
	Name       string
	Attributes []attribute.KeyValue
	Time       time.Time
}

// End ends the span (once) and hands it to its recorder.
func (s *Span) End(opts ...trace.SpanEndOption) {
	cfg := trace.NewSpanEndConfig(opts...)
	s.mu.Lock()
	if !s.end.IsZero() {
		s.mu.Unlock()
		return
	}
	s.end = cfg.Timestamp()
	if s.end.IsZero() {
		s.end = time.Now()
	}
	s.mu.Unlock()
	s.r.mu.Lock()
	s.r.ended = append(s.r.ended, s)
	s.r.mu.Unlock()
}

// AddEvent records an event unless the span has ended.
func (s *Span) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	at := cfg.Timestamp()
	if at.IsZero() {
		at = time.Now()
	}
	if s.end.IsZero() {
		s.events = append(s.events, Event{Name: name, Attributes: cfg.Attributes(), Time: at})
	}
}

// RecordError records err as an "exception" event, as the SDK does.
func (s *Span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(attribute.String("exception.message", err.Error())))
	s.AddEvent("exception", opts...)
}

// IsRecording reports whether the span has not ended yet.
func (s *Span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end.IsZero()
}

// SetStatus sets the status unless the span has ended.
func (s *Span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end.IsZero() {
		s.code, s.desc = code, description
	}
}

// SetName renames the span unless it has ended.
func (s *Span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end.IsZero() {
		s.name = name
	}
}

// SetAttributes sets attributes unless the span has ended; a key set again
// keeps its place and takes the new value, as in the SDK.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.end.IsZero() {
		return
	}
	for _, a := range kv {
		if i := slices.IndexFunc(s.attrs, func(b attribute.KeyValue) bool { return b.Key == a.Key }); i >= 0 {
			s.attrs[i] = a
		} else {
			s.attrs = append(s.attrs, a)
		}
	}
}

// AddLink is accepted and dropped: no test here reads links.
func (s *Span) AddLink(trace.Link) {}

// SpanContext returns the span's own context.
func (s *Span) SpanContext() trace.SpanContext { return s.sc }

// TracerProvider returns the recorder.
func (s *Span) TracerProvider() trace.TracerProvider { return s.r }

// Name returns the span's name.
func (s *Span) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

// Parent returns the parent's span context (invalid for a root span).
func (s *Span) Parent() trace.SpanContext { return s.parent }

// Attributes returns the span's attributes, in the order they were set.
func (s *Span) Attributes() []attribute.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attribute.KeyValue(nil), s.attrs...)
}

// Events returns the span's events, oldest first.
func (s *Span) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// Status returns the span's status code and description.
func (s *Span) Status() (codes.Code, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code, s.desc
}

// StartTime returns when the span started.
func (s *Span) StartTime() time.Time { return s.start }

// EndTime returns when the span ended (zero while it runs).
func (s *Span) EndTime() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}
