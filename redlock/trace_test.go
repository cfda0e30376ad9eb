package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"

	"github.com/asynqlock/asynqlock/internal/spantest"
)

// tracing returns a provider that records every span in memory, twice:
// as the provider to give the client and as the recorder to read.
func tracing(*testing.T) (*spantest.Recorder, *spantest.Recorder) {
	r := spantest.New()
	return r, r
}

// attrs returns a span's attributes by key.
func attrs(s *spantest.Span) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		m[a.Key] = a.Value
	}
	return m
}

// spansNamed returns the ended spans called name, oldest first.
func spansNamed(exp *spantest.Recorder, name string) []*spantest.Span {
	var out []*spantest.Span
	for _, s := range exp.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// TestAcquireAndReleaseSpans: every acquisition and release records a span,
// a child of the caller's, with resource, outcome, attempts, fence and how
// the lock came (its own round, a local hand-over, the nodes' queue).
func TestAcquireAndReleaseSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, exp := tracing(t)
		c, mems := memClient(t, 3, WithTracerProvider(tp))
		other := memClientOn(t, mems, WithTracerProvider(tp))
		ctx, parent := tp.Tracer("test").Start(context.Background(), "task")

		first, err := c.Acquire(ctx, "sku", time.Minute, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.TryAcquire(ctx, "sku", time.Minute); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryAcquire on a held lock: %v", err)
		}
		local := waitFor(ctx, c, "sku", time.Minute, WithFencing())
		synctest.Wait()
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		second := <-local
		remote := waitFor(ctx, other, "sku", time.Minute)
		synctest.Wait()
		if err := second.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		third := <-remote
		if third.err != nil {
			t.Fatal(third.err)
		}
		_ = third.l.Release(ctx)
		parent.End()

		acq := spansNamed(exp, spanAcquire)
		want := []struct {
			outcome, handover string
			fenced            bool
		}{{"acquired", "none", true}, {"locked", "", false}, {"acquired", "local", true}, {"acquired", "remote", false}}
		if len(acq) != len(want) {
			t.Fatalf("%d acquire spans, want %d", len(acq), len(want))
		}
		for i, s := range acq {
			a := attrs(s)
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("acquire span %d is not a child of the caller's span", i)
			}
			if a[attrResource].AsString() != "sku" || a[attrOutcome].AsString() != want[i].outcome ||
				a[attrHandover].AsString() != want[i].handover || a[attrAttempts].AsInt64() < 1 {
				t.Errorf("acquire span %d: %v, want outcome %q, handover %q", i, s.Attributes(), want[i].outcome, want[i].handover)
			}
			if _, fenced := a[attrFence]; fenced != want[i].fenced {
				t.Errorf("acquire span %d: fence attribute present %v, want %v", i, fenced, want[i].fenced)
			}
		}
		if a := attrs(acq[3]); a[attrAttempts].AsInt64() < 2 {
			t.Errorf("a lock won through the nodes' queue reports %d attempts", a[attrAttempts].AsInt64())
		}
		rel := spansNamed(exp, spanRelease)
		if len(rel) != 3 {
			t.Fatalf("%d release spans, want 3", len(rel))
		}
		for i, s := range rel {
			if attrs(s)[attrOutcome].AsString() != "released" || s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("release span %d: %v", i, s.Attributes())
			}
		}
	})
}

// TestSpanOutcomes: failures are named in asynqlock.outcome (and the
// worker's outcome label) by outcomeOf.
func TestSpanOutcomes(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, "acquired"},
		{&opError{kinds: []error{ErrLocked}}, "locked"},
		{&opError{kinds: []error{ErrQuorum}}, "quorum"},
		{context.DeadlineExceeded, "canceled"},
		{errClosed, "error"},
	} {
		if got := outcomeOf(tt.err); got != tt.want {
			t.Errorf("outcomeOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestGlobalProviderSetLater: with no provider given, spans go to the
// global provider once the application sets one, and nothing is started
// before (the untraced common path allocates no span).
func TestGlobalProviderSetLater(t *testing.T) {
	c, _ := memClient(t, 3)
	if c.tracer.get() != nil {
		t.Skip("a global tracer provider is already set in this test binary")
	}
	tp, exp := tracing(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	l, err := c.TryAcquire(context.Background(), "later", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
	if n := len(spansNamed(exp, spanAcquire)); n != 1 {
		t.Fatalf("%d acquire spans after the global provider was set, want 1", n)
	}
}
