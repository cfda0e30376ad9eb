package worker

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver on loopback: it decodes every
// export request as the OTLP protobuf messages and keeps the spans with
// their service's name.
type collector struct {
	srv *httptest.Server

	mu      sync.Mutex
	spans   []*tracepb.Span
	service map[string]string // span ID (hex) → service.name of its resource
	bad     []string          // requests that were not OTLP/HTTP protobuf trace exports
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{service: map[string]string{}}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) serve(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil && r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
		err = proto.Unmarshal(body, &req)
	} else if err == nil {
		err = http.ErrNotSupported
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.bad = append(c.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+": "+err.Error())
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		svc := pbAttrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s)
				c.service[hex.EncodeToString(s.GetSpanId())] = svc
			}
		}
	}
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	rw.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = rw.Write(resp)
}

// named returns the spans received called name.
func (c *collector) named(name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// pbAttrs returns OTLP attributes by key, as strings (ints in decimal).
func pbAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			b, _ := json.Marshal(v.GetIntValue())
			m[kv.GetKey()] = string(b)
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

// TestWorkerExportsTaskAndLockSpansOverOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT
// set, a worker exports over OTLP/HTTP, on its shutdown at the latest, the
// span asynq.task of a task it ran, with the task's type, ID, queue and
// retry count, and under it the lock's asynqlock.acquire and
// asynqlock.release spans with their attributes and the handler's own span;
// OTEL_SERVICE_NAME names the service.
func TestWorkerExportsTaskAndLockSpansOverOTLP(t *testing.T) {
	col := newCollector(t)
	t.Setenv(envEndpoint, col.srv.URL)
	t.Setenv(envTracesEndpoint, "")
	t.Setenv("OTEL_SERVICE_NAME", "inventory-worker")
	f := newFixture(t)
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	resource := make(chan string, 1)
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		_, span := otel.Tracer("app").Start(ctx, "db.update")
		span.End()
		li, _ := middleware.LockFromContext(ctx)
		resource <- li.Resource
		return nil
	}), middleware.ByField("sku"), middleware.WithLockOptions(redlock.WithFencing()))
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, w)
	info, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", []byte(`{"sku":"A"}`)), asynq.MaxRetry(3))
	if err != nil {
		t.Fatal(err)
	}
	var res string
	select {
	case res = <-resource:
	case <-time.After(30 * time.Second):
		t.Fatal("the task never ran")
	}
	waitFor(t, "task done", 30*time.Second, func() bool { return queueDone(t, f, 1) })
	if err := stop(); err != nil { // flushes the spans
		t.Fatal(err)
	}
	task := one(t, col, "asynq.task")
	wantPB(t, task, map[string]string{"messaging.system": "asynq", "asynq.task.type": "stock:adjust", "asynq.task.id": info.ID,
		"asynq.queue": "default", "asynq.task.retry_count": "0", "asynq.task.max_retry": "3", "asynq.task.outcome": "ok"})
	if task.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER || col.service[hex.EncodeToString(task.GetSpanId())] != "inventory-worker" {
		t.Errorf("task span: kind %v, service %q", task.GetKind(), col.service[hex.EncodeToString(task.GetSpanId())])
	}
	acq, rel, app := one(t, col, "asynqlock.acquire"), one(t, col, "asynqlock.release"), one(t, col, "db.update")
	for _, s := range []*tracepb.Span{acq, rel, app} {
		if string(s.GetParentSpanId()) != string(task.GetSpanId()) || string(s.GetTraceId()) != string(task.GetTraceId()) {
			t.Errorf("span %s is not a child of the task's span", s.GetName())
		}
	}
	wantPB(t, acq, map[string]string{"asynqlock.resource": res, "asynqlock.outcome": "acquired", "asynqlock.attempts": "1", "asynqlock.handover": "none"})
	if f := pbAttrs(acq.GetAttributes())["asynqlock.fence"]; f == "" || f == "0" {
		t.Errorf("acquire span: asynqlock.fence %q, want the lock's fence", f)
	}
	wantPB(t, rel, map[string]string{"asynqlock.resource": res, "asynqlock.outcome": "released"})
	if len(col.bad) > 0 {
		t.Errorf("requests the collector could not decode: %v", col.bad)
	}
}

// queueDone reports whether n tasks were processed and none is left.
func queueDone(t *testing.T, f *fixture, n int) bool {
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: f.broker.Addr()})
	defer insp.Close()
	qi, err := insp.GetQueueInfo("default")
	return err == nil && qi.Processed >= n && qi.Pending+qi.Active+qi.Retry+qi.Scheduled == 0
}

// one returns the only span received called name.
func one(t *testing.T, col *collector, name string) *tracepb.Span {
	t.Helper()
	s := col.named(name)
	if len(s) != 1 {
		t.Fatalf("%d spans %s received, want 1", len(s), name)
	}
	return s[0]
}

// wantPB checks some of a span's attributes.
func wantPB(t *testing.T, s *tracepb.Span, want map[string]string) {
	t.Helper()
	got := pbAttrs(s.GetAttributes())
	for k, v := range want {
		if got[k] != v {
			t.Errorf("span %s: %s = %q, want %q (all: %v)", s.GetName(), k, got[k], v, got)
		}
	}
}

// TestExportFailureLoggedOncePerChange: a worker whose collector refuses
// connections logs one Warn naming the endpoint however many batches fail,
// nothing from OpenTelemetry's error handler, and still runs its tasks.
func TestExportFailureLoggedOncePerChange(t *testing.T) {
	// Every export is refused, and no other test's listener can take the port
	// meanwhile (one that did made the error an EOF).
	endpoint := "http://" + redistest.ClosedAddr(t)
	t.Setenv(envEndpoint, endpoint)
	t.Setenv(envTracesEndpoint, "")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // a batch every 20ms rather than 5s
	f := newFixture(t)
	rec := &logRecorder{}
	w, err := New(f.cfg, WithLogger(slog.New(rec)))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 10)
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran <- struct{}{}
		return nil
	}), middleware.ByField("sku"))
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, w)
	const tasks = 5
	for range tasks {
		if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", []byte(`{"sku":"A"}`))); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			t.Fatal("a task never ran")
		}
		time.Sleep(60 * time.Millisecond) // its spans go in a batch of their own
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := rec.count("WARN trace export failing", "endpoint="+endpoint, "refused"); n != 1 {
		t.Fatalf("%d 'trace export failing' lines, want 1: %v", n, rec.recs)
	}
	if n := rec.count("opentelemetry:"); n != 0 {
		t.Fatalf("%d lines from OpenTelemetry's error handler: %v", n, rec.recs)
	}
}
