package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestOTelEnv: an endpoint turns export on, OTEL_SDK_DISABLED and
// OTEL_TRACES_EXPORTER=none turn it off, and a value the exporter would
// ignore or misuse is a problem naming its variable.
func TestOTelEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		export   bool
		endpoint string
		problems []string // variables with a problem
	}{
		{name: "unset", vars: nil},
		{name: "blank", vars: map[string]string{envEndpoint: "  "}},
		{name: "endpoint", vars: map[string]string{envEndpoint: "http://collector:4318"}, export: true, endpoint: "http://collector:4318"},
		{name: "traces endpoint wins", vars: map[string]string{envEndpoint: "http://a:4318", envTracesEndpoint: "https://b/v1/traces"}, export: true, endpoint: "https://b/v1/traces"},
		{name: "credentials not shown", vars: map[string]string{envEndpoint: "https://u:secret@b:4318"}, export: true, endpoint: "https://u:xxxxx@b:4318"},
		{name: "disabled", vars: map[string]string{envEndpoint: "http://a:4318", envSDKDisabled: "TRUE"}},
		{name: "exporter none", vars: map[string]string{envEndpoint: "http://a:4318", envTracesExporter: "none"}},
		{name: "http/json", vars: map[string]string{envEndpoint: "http://a:4318", envProtocol: "http/json"}, export: true, endpoint: "http://a:4318"},
		{name: "no scheme", vars: map[string]string{envEndpoint: "localhost:4318"}, problems: []string{envEndpoint}},
		{name: "no host", vars: map[string]string{envTracesEndpoint: "http:///v1/traces"}, problems: []string{envTracesEndpoint}},
		{name: "bad port", vars: map[string]string{envEndpoint: "http://a:port"}, problems: []string{envEndpoint}},
		{name: "grpc", vars: map[string]string{envEndpoint: "http://a:4317", envTracesProtocol: "grpc"}, problems: []string{envTracesProtocol}},
		{name: "unknown protocol", vars: map[string]string{envEndpoint: "http://a:4318", envProtocol: "thrift"}, problems: []string{envProtocol}},
		{name: "other exporter", vars: map[string]string{envEndpoint: "http://a:4318", envTracesExporter: "zipkin"}, problems: []string{envTracesExporter}},
		{name: "every problem at once", vars: map[string]string{envEndpoint: "a:1", envProtocol: "grpc"}, problems: []string{envEndpoint, envProtocol}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, ps := readOTelEnv(func(k string) string { return tc.vars[k] })
			var got []string
			for _, p := range ps {
				got = append(got, p.Var)
				if strings.Contains(p.Message, "secret") {
					t.Errorf("%s: a problem quotes a password: %s", p.Var, p.Message)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.problems) {
				t.Fatalf("problems %v, want %v: %v", got, tc.problems, ps)
			}
			if env.export != tc.export || env.endpoint != tc.endpoint {
				t.Fatalf("got %+v, want export %v to %q", env, tc.export, tc.endpoint)
			}
		})
	}
}

// TestNewRefusesABadOTLPEndpoint: New and LoadConfigFrom refuse an endpoint
// that is no URL the exporter can use, naming the variable.
func TestNewRefusesABadOTLPEndpoint(t *testing.T) {
	vars := goodEnv()
	vars[envEndpoint] = "otel-collector:4318"
	if _, err := LoadConfigFrom(vars); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), envEndpoint) {
		t.Fatalf("LoadConfigFrom: %v, want ErrConfig naming %s", err, envEndpoint)
	}
	cfg, err := LoadConfigFrom(goodEnv())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envEndpoint, "otel-collector:4318")
	if _, err := New(cfg, quiet()); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "http://otel-collector:4318") {
		t.Fatalf("New: %v, want ErrConfig with the URL to write", err)
	}
}

// TestNoEndpointInstallsNothing: with no OTLP endpoint set, New makes no
// trace pipeline and leaves the global provider as it was (its task spans
// follow the global provider: none while it is unset, see
// TraceTasks).
func TestNoEndpointInstallsNothing(t *testing.T) {
	t.Setenv(envEndpoint, "")
	t.Setenv(envTracesEndpoint, "")
	before := otel.GetTracerProvider()
	if w := offline(t); w.traces != nil {
		t.Fatal("a trace pipeline was made with no endpoint set")
	}
	if otel.GetTracerProvider() != before {
		t.Fatal("New changed the global tracer provider with no endpoint set")
	}
}

// TestExportFailuresLoggedPerChange: failing exports are logged once at
// Warn when they start, once at Info when one works again, and again when
// they fail anew; never per batch.
func TestExportFailuresLoggedPerChange(t *testing.T) {
	rec := &logRecorder{}
	fake := &fakeExporter{}
	forgot := 0
	e := &exportWatch{next: fake, log: slog.New(rec), endpoint: "http://collector:4318", recovered: func() { forgot++ }}
	spans := make([]sdktrace.ReadOnlySpan, 2)
	for _, fail := range []bool{false, true, true, true, false, false, true, true} {
		fake.err = nil
		if fail {
			fake.err = errors.New("connection refused")
		}
		if err := e.ExportSpans(context.Background(), spans); err != nil {
			t.Fatalf("ExportSpans returned %v: the batch processor would hand it to the error handler", err)
		}
	}
	warn := rec.count("WARN trace export failing", "endpoint=http://collector:4318", "connection refused")
	back := rec.count("INFO trace export works again", "spans_lost=6")
	if warn != 2 || back != 1 || forgot != 1 || len(rec.recs) != 3 {
		t.Fatalf("%d failing and %d recovered lines (%d forgets), want 2 and 1: %v", warn, back, forgot, rec.recs)
	}
}

// TestOTelErrorsLoggedOnce: OpenTelemetry's global error handler writes
// through the worker's logger, once per distinct error until its lines are
// forgotten.
func TestOTelErrorsLoggedOnce(t *testing.T) {
	rec := &logRecorder{}
	once := workerconfig.NewOnce(0)
	otelLogs(slog.New(rec), once)
	t.Cleanup(func() { otelLogs(slog.New(slog.DiscardHandler), workerconfig.NewOnce(0)) })
	for range 3 {
		otel.Handle(errors.New("max queue size reached"))
	}
	once.ForgetSource(otelSource)
	otel.Handle(errors.New("max queue size reached"))
	if n := rec.count("WARN opentelemetry: max queue size reached"); n != 2 || len(rec.recs) != 2 {
		t.Fatalf("%d lines, want 2 (one, then one after forgetting): %v", n, rec.recs)
	}
}

// fakeExporter fails with err.
type fakeExporter struct{ err error }

func (f *fakeExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return f.err }
func (f *fakeExporter) Shutdown(context.Context) error                             { return nil }
