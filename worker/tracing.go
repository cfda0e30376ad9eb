package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// traceFlushTimeout bounds the flush of the spans still buffered when the
// worker closes: an unreachable collector must not hold the exit up.
const traceFlushTimeout = 5 * time.Second

// unsetGlobal is the global tracer provider before an application sets
// one: it records nothing.
var unsetGlobal = otel.GetTracerProvider()

// installed is the provider a worker of this process last made global.
var installed atomic.Pointer[sdktrace.TracerProvider]

// appProvider reports whether the application set the global provider:
// neither the unset one nor one a worker installed.
func appProvider() bool {
	g := otel.GetTracerProvider()
	if own := installed.Load(); own != nil && g == trace.TracerProvider(own) {
		return false
	}
	return g != unsetGlobal
}

// startTracing makes the worker's trace pipeline when env asks for one: an
// OTLP/HTTP exporter configured by the OTEL_* variables, behind a batch
// span processor, in a provider that also becomes the global one, so that
// the handlers' own spans (otel.Tracer) join their task's trace. It returns
// nil when env asks for none, or when the application set a global
// provider of its own before New: the worker's spans go there instead.
func startTracing(env otelEnv, log *slog.Logger, once *workerconfig.Once) (*sdktrace.TracerProvider, error) {
	if !env.export {
		return nil, nil
	}
	if appProvider() {
		log.Debug("an OTLP endpoint is set, but the application set a tracer provider: the worker's spans go to it", "endpoint", env.endpoint)
		return nil, nil
	}
	exp, err := otlptracehttp.New(context.Background())
	if err != nil {
		return nil, fmt.Errorf("worker: OTLP trace exporter: %w", err)
	}
	watch := &exportWatch{next: exp, log: log, endpoint: env.endpoint, recovered: func() { once.ForgetSource(otelSource) }}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(watch))
	installed.Store(tp)
	otel.SetTracerProvider(tp)
	return tp, nil
}

// stopTracing flushes the spans still buffered to the exporter and shuts
// the worker's trace pipeline down (nothing when it has none).
func (w *Worker) stopTracing() error {
	if w.traces == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := w.traces.Shutdown(ctx); err != nil {
		return fmt.Errorf("worker: flushing traces: %w", err)
	}
	return nil
}
