package worker

import (
	"context"
	"log/slog"
	"sync"

	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otelSource is the component of OpenTelemetry's log lines.
const otelSource = "otel"

// otelLogs routes OpenTelemetry's own lines (its global error handler and
// its internal logger, both writing to stderr by default) through once, so
// that each is logged once per change of state with component=otel, at
// Warn for errors.
func otelLogs(l *slog.Logger, once *workerconfig.Once) {
	ol := once.Logger(l, otelSource)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		ol.Warn("opentelemetry: " + err.Error())
	}))
	otel.SetLogger(logr.FromSlogHandler(ol.Handler()))
}

// exportWatch passes finished spans to the OTLP exporter and logs its
// failures once per change of state: at Warn when exports start failing
// (with the endpoint and the cause), at Info when one succeeds again (with
// the spans lost meanwhile), nothing per batch. It returns nil in place of
// an export's error, which the batch span processor would otherwise hand
// to the global error handler for every batch.
type exportWatch struct {
	next      sdktrace.SpanExporter
	log       *slog.Logger
	endpoint  string
	recovered func() // the failure is over: lines about it may return

	mu      sync.Mutex
	failing bool
	lost    int // spans of failed exports since the failure began
}

// ExportSpans exports spans, noting whether it worked.
func (e *exportWatch) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.next.ExportSpans(ctx, spans)
	e.note(err, len(spans))
	return nil
}

// Shutdown shuts the exporter down.
func (e *exportWatch) Shutdown(ctx context.Context) error { return e.next.Shutdown(ctx) }

// note logs a change between exports working and failing.
func (e *exportWatch) note(err error, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil && !e.failing:
		e.failing, e.lost = true, n
		e.log.Warn("trace export failing; spans are dropped until it works again", "endpoint", e.endpoint, "err", err)
	case err != nil:
		e.lost += n
	case e.failing:
		e.failing = false
		e.log.Info("trace export works again", "endpoint", e.endpoint, "spans_lost", e.lost)
		if e.recovered != nil {
			e.recovered()
		}
	}
}
