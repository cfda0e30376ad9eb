package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/asynqlock/asynqlock/internal/spantest"
)

// traced is a test's tracing: an in-memory recorder behind a provider, and
// a lock client that records its spans there too.
type traced struct {
	*env
	sr    *spantest.Recorder
	tp    trace.TracerProvider
	locks *redlock.Client // records asynqlock.acquire and asynqlock.release
}

func newTraced(t *testing.T) *traced {
	t.Helper()
	e := newEnv(t)
	sr := spantest.New()
	tp := trace.TracerProvider(sr)
	c, err := redlock.NewFromURLs([]string{e.srv.URL()}, redlock.WithRetryDelay(5*time.Millisecond, 10*time.Millisecond),
		redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &traced{env: e, sr: sr, tp: tp, locks: c}
}

// run runs task through h under a task span, as a traced asynq server
// would, and returns the task's error and span.
func (tr *traced) run(h asynq.Handler, task *asynq.Task) (*spantest.Span, error) {
	ctx, span := tr.tp.Tracer("test").Start(context.Background(), "asynq.task")
	err := h.ProcessTask(ctx, task)
	span.End()
	return span.(*spantest.Span), err
}

// spans returns the ended spans named name.
func (tr *traced) spans(name string) []*spantest.Span {
	var out []*spantest.Span
	for _, s := range tr.sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// childOf reports whether s's parent is p.
func childOf(s, p *spantest.Span) bool {
	return s.Parent().SpanID() == p.SpanContext().SpanID() && s.SpanContext().TraceID() == p.SpanContext().TraceID()
}

func attrOf(attrs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, a := range attrs {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// event returns the task span's event named name.
func event(t *testing.T, span *spantest.Span, name string) (spantest.Event, bool) {
	t.Helper()
	var found []spantest.Event
	for _, ev := range span.Events() {
		if ev.Name == name {
			found = append(found, ev)
		}
	}
	if len(found) > 1 {
		t.Fatalf("event %s recorded %d times", name, len(found))
	}
	if len(found) == 0 {
		return spantest.Event{}, false
	}
	return found[0], true
}

func wantAttr(t *testing.T, what string, attrs []attribute.KeyValue, k attribute.Key, want string) {
	t.Helper()
	if v, ok := attrOf(attrs, k); !ok || fmt.Sprint(v.AsInterface()) != want {
		t.Fatalf("%s: %s = %q (set %v), want %q", what, k, fmt.Sprint(v.AsInterface()), ok, want)
	}
}

// noEvents fails if the task's span has any of the middleware's events.
func noEvents(t *testing.T, span *spantest.Span, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, ok := event(t, span, n); ok {
			t.Fatalf("event %s recorded, though it did not happen", n)
		}
	}
}

// TestTraceUncontended: a task that gets its lock at once has the lock
// client's acquire and release spans as children of its span, no wait span
// and no event.
func TestTraceUncontended(t *testing.T) {
	tr := newTraced(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	h := Lock(tr.locks, ByField("sku"), WithTracerProvider(tr.tp))(&recorder{})
	task, err := tr.run(h, adjust())
	if err != nil {
		t.Fatal(err)
	}
	// The release span ends once the nodes answered, after the task.
	waitFor(t, "the release span", func() bool { return len(tr.spans("asynqlock.release")) > 0 })
	acq, rel := tr.spans("asynqlock.acquire"), tr.spans("asynqlock.release")
	if len(acq) != 1 || len(rel) != 1 || !childOf(acq[0], task) || !childOf(rel[0], task) {
		t.Fatalf("%d acquire and %d release spans, want one each, children of the task's span", len(acq), len(rel))
	}
	wantAttr(t, "acquire", acq[0].Attributes(), attrResource, res)
	wantAttr(t, "acquire", acq[0].Attributes(), attrOutcome, "acquired")
	if w := tr.spans(spanWait); len(w) != 0 {
		t.Fatalf("%d wait spans for a task that did not wait", len(w))
	}
	noEvents(t, task, eventParked, eventLost, eventRollback)
}

// TestTraceWait: a task that meets its lock busy and waits for it has an
// asynqlock.wait span under its own, spanning the wait, with the
// acquisition that ended it as a child; its first try, refused, is a child
// of the task's span.
func TestTraceWait(t *testing.T) {
	tr := newTraced(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	held, err := tr.other.TryAcquire(context.Background(), res, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const hold = 150 * time.Millisecond
	go func() {
		time.Sleep(hold)
		_ = held.Release(context.Background())
	}()
	h := Lock(tr.locks, ByField("sku"), Wait(10*time.Second), WithTracerProvider(tr.tp))(&recorder{})
	task, err := tr.run(h, adjust())
	if err != nil {
		t.Fatal(err)
	}
	waits := tr.spans(spanWait)
	if len(waits) != 1 || !childOf(waits[0], task) {
		t.Fatalf("%d wait spans, want one, a child of the task's span", len(waits))
	}
	w := waits[0]
	wantAttr(t, "wait", w.Attributes(), attrResource, res)
	wantAttr(t, "wait", w.Attributes(), attrOutcome, "acquired")
	if _, ok := attrOf(w.Attributes(), "asynqlock.handover"); ok {
		t.Fatal("the wait span names a handover: its winning acquisition's span does, from the lock client")
	}
	if d := w.EndTime().Sub(w.StartTime()); d <= 0 {
		t.Fatalf("wait span lasted %v", d)
	}
	var first, won int
	for _, s := range tr.spans("asynqlock.acquire") {
		o, _ := attrOf(s.Attributes(), attrOutcome)
		switch {
		case o.AsString() == "locked" && childOf(s, task):
			first++
		case o.AsString() == "acquired" && childOf(s, w):
			won++
			wantAttr(t, "winning acquire", s.Attributes(), "asynqlock.handover", "remote")
		}
	}
	if first != 1 || won != 1 {
		t.Fatalf("refused first tries under the task %d, winning acquisitions under the wait %d; want 1 and 1", first, won)
	}
	noEvents(t, task, eventParked, eventLost, eventRollback)
}

// TestTraceParked: a task parked behind a busy lock has an asynqlock.parked
// event on its span (resource, reason, position, backstop); the same
// conflict without a broker requeues the task and reports no park.
func TestTraceParked(t *testing.T) {
	tr := newTraced(t)
	withTaskIDs(t)
	held, err := tr.other.TryAcquire(context.Background(), res, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	parking := Lock(tr.locks, ByField("sku"), WithBroker(tr.raw), withMaxWaiters(0), WithTracerProvider(tr.tp))(&recorder{})
	run := func(h asynq.Handler, id string) (*spantest.Span, error) {
		ctx, span := tr.tp.Tracer("test").Start(context.WithValue(context.Background(), taskIDKey{}, id), "asynq.task")
		err := h.ProcessTask(ctx, adjust())
		span.End()
		return span.(*spantest.Span), err
	}
	task, err := run(parking, "p1")
	if !errors.Is(err, errConflict) {
		t.Fatalf("task error %v, want a conflict (parked)", err)
	}
	ev, ok := event(t, task, eventParked)
	if !ok {
		t.Fatal("no asynqlock.parked event on the parked task's span")
	}
	wantAttr(t, "parked", ev.Attributes, attrResource, res)
	wantAttr(t, "parked", ev.Attributes, attrPosition, "1")
	if r, _ := attrOf(ev.Attributes, attrReason); !strings.Contains(r.AsString(), "locked") {
		t.Fatalf("parked reason %q, want the conflict's", r.AsString())
	}
	if b, _ := attrOf(ev.Attributes, attrBackstop); b.AsInt64() < parkBackstopMin.Milliseconds() {
		t.Fatalf("parked backstop %dms, want at least %v", b.AsInt64(), parkBackstopMin)
	}
	noEvents(t, task, eventLost, eventRollback)

	requeue := Lock(tr.locks, ByField("sku"), withMaxWaiters(0), WithTracerProvider(tr.tp))(&recorder{})
	task, err = run(requeue, "r1")
	if !errors.Is(err, errConflict) {
		t.Fatalf("task error %v, want a conflict (requeued)", err)
	}
	noEvents(t, task, eventParked, eventLost, eventRollback)
}

// TestTraceLostAndRollback: a task whose lock is lost while it runs has an
// asynqlock.lost event, then an asynqlock.rollback event (the hook ran
// under the re-acquired lock, whose acquisition is a child of the task's
// span).
func TestTraceLostAndRollback(t *testing.T) {
	tr := newTraced(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	rec := &recorder{fn: func(ctx context.Context) error {
		tr.raw.Del(context.Background(), "asynqlock:{"+res+"}")
		<-ctx.Done()
		return ctx.Err()
	}}
	h := Lock(tr.locks, ByField("sku"), WithTTL(300*time.Millisecond), WithTracerProvider(tr.tp),
		WithRollback(func(context.Context, *asynq.Task, error) error { return nil }))(rec)
	task, err := tr.run(h, adjust())
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("task error %v, want ErrLockLost", err)
	}
	lost, ok := event(t, task, eventLost)
	if !ok {
		t.Fatal("no asynqlock.lost event")
	}
	wantAttr(t, "lost", lost.Attributes, attrResource, res)
	if r, _ := attrOf(lost.Attributes, attrReason); !strings.Contains(r.AsString(), "lost") {
		t.Fatalf("lost reason %q", r.AsString())
	}
	rb, ok := event(t, task, eventRollback)
	if !ok || rb.Time.Before(lost.Time) {
		t.Fatalf("rollback event recorded %v, want one after the loss", ok)
	}
	wantAttr(t, "rollback", rb.Attributes, attrReason, "lock_lost")
	wantAttr(t, "rollback", rb.Attributes, attrOutcome, "ok")
	var acquired int
	for _, s := range tr.spans("asynqlock.acquire") {
		if childOf(s, task) {
			acquired++
		}
	}
	if acquired != 2 {
		t.Fatalf("%d acquire spans under the task, want 2 (the run's, the rollback's)", acquired)
	}
}

// TestTraceRollbackAfterHandlerError: a failed handler's rollback is an
// asynqlock.rollback event with the handler's error, and its failure is
// reported; no loss is.
func TestTraceRollbackAfterHandlerError(t *testing.T) {
	tr := newTraced(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	failed := errors.New("stock service down")
	rec := &recorder{fn: func(context.Context) error { return failed }}
	h := Lock(tr.locks, ByField("sku"), WithTracerProvider(tr.tp),
		WithRollback(func(context.Context, *asynq.Task, error) error { return errors.New("undo failed") }))(rec)
	task, err := tr.run(h, adjust())
	if !errors.Is(err, failed) {
		t.Fatalf("task error %v, want the handler's", err)
	}
	rb, ok := event(t, task, eventRollback)
	if !ok {
		t.Fatal("no asynqlock.rollback event")
	}
	wantAttr(t, "rollback", rb.Attributes, attrResource, res)
	wantAttr(t, "rollback", rb.Attributes, attrReason, "handler_error")
	wantAttr(t, "rollback", rb.Attributes, attrCause, failed.Error())
	wantAttr(t, "rollback", rb.Attributes, attrOutcome, "failed")
	if e, _ := attrOf(rb.Attributes, attrError); !strings.Contains(e.AsString(), "undo failed") {
		t.Fatalf("rollback error attribute %q", e.AsString())
	}
	noEvents(t, task, eventLost, eventParked)
}
