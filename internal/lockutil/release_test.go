package lockutil

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

// releaser records the context it is released with.
type releaser struct {
	err      error
	deadline time.Time
	value    any
}

func (r *releaser) Release(ctx context.Context) error {
	r.err = ctx.Err()
	r.deadline, _ = ctx.Deadline()
	r.value = ctx.Value(ctxKey{})
	return errors.New("released")
}

// TestReleaseOutlivesCallersContext: a release made after the caller's
// context ended still gets a live context, bounded by ReleaseTimeout, with
// the caller's values; the lock's answer is returned.
func TestReleaseOutlivesCallersContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "trace-1"))
	cancel()
	r := &releaser{}
	start := time.Now()
	err := Release(ctx, r)
	end := time.Now()
	if err == nil || err.Error() != "released" {
		t.Fatalf("Release returned %v, want the lock's answer", err)
	}
	if r.err != nil {
		t.Fatalf("released with a context already done: %v", r.err)
	}
	if r.deadline.Before(start.Add(ReleaseTimeout)) || r.deadline.After(end.Add(ReleaseTimeout)) {
		t.Fatalf("release deadline %v, want %v after the call", r.deadline, ReleaseTimeout)
	}
	if r.value != "trace-1" {
		t.Fatalf("release context lost the caller's values: %v", r.value)
	}
}

func TestLater(t *testing.T) {
	a := time.Unix(100, 0)
	b := a.Add(time.Nanosecond)
	if !Later(a, b).Equal(b) || !Later(b, a).Equal(b) || !Later(a, a).Equal(a) {
		t.Fatal("Later does not return the later time")
	}
}
