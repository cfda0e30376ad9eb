package redlock

import (
	"context"
	"errors"
	"testing"
)

// TestNilLockIsNotHeld: every method of a nil *Lock answers as for a lock
// not held (ErrNotHeld, zero values, an ended keep-alive) instead of
// panicking, as a caller that ignored an acquisition's error would call them.
func TestNilLockIsNotHeld(t *testing.T) {
	var l *Lock
	ctx := context.Background()
	if err := l.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release: %v, want ErrNotHeld", err)
	}
	if err := l.Extend(ctx, 0); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend: %v, want ErrNotHeld", err)
	}
	if err := (*mechanics)(l).LeaveToExpire(); !errors.Is(err, ErrNotHeld) {
		t.Errorf("LeaveToExpire: %v, want ErrNotHeld", err)
	}
	done := make(chan error, 1)
	(*mechanics)(l).ReleaseAsync(ctx, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrNotHeld) {
		t.Errorf("ReleaseAsync: %v, want ErrNotHeld", err)
	}
	(*mechanics)(l).ReleaseAsync(ctx, nil)
	kctx, cancel := l.KeepAlive(ctx)
	defer cancel()
	if kctx.Err() == nil || !errors.Is(context.Cause(kctx), ErrNotHeld) {
		t.Errorf("KeepAlive: context error %v, cause %v; want ended with ErrNotHeld", kctx.Err(), context.Cause(kctx))
	}
	if l.Resource() != "" || l.Token() != "" || l.Fence() != 0 || l.Slot() != 0 || !l.Until().IsZero() || l.Lost() != nil {
		t.Errorf("accessors: %q %q %d %d %v %v; want zero values", l.Resource(), l.Token(), l.Fence(), l.Slot(), l.Until(), l.Lost())
	}
}
