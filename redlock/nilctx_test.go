package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestNilContextsAreRefused: Release(nil) and KeepAlive(nil) neither panic
// nor strand the lock: they are refused with ErrInvalid, the lock stays held,
// and a proper Release then passes the turn to the next local waiter.
func TestNilContextsAreRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		ctx := context.Background()
		l, err := c.Acquire(ctx, "r", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			l2, err := c.Acquire(wctx, "r", time.Second)
			if err == nil {
				err = l2.Release(ctx)
			}
			waited <- err
		}()
		synctest.Wait() // the waiter queues behind the holder

		var nilCtx context.Context
		if err := noPanic(func() error { return l.Release(nilCtx) }); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Release(nil): %v, want ErrInvalid", err)
		}
		var kctx context.Context
		if err := noPanic(func() error { kctx, _ = l.KeepAlive(nilCtx); return nil }); err != nil {
			t.Fatalf("KeepAlive(nil): %v", err)
		}
		if cause := context.Cause(kctx); !errors.Is(cause, ErrInvalid) {
			t.Fatalf("KeepAlive(nil) context's cause: %v, want ErrInvalid", cause)
		}
		if n := holders(c, mems, "r", l.Token()); n != 3 {
			t.Fatalf("after the refused calls %d of 3 nodes hold the lock, want all", n)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if err := <-waited; err != nil {
			t.Fatalf("the local waiter never got its turn: %v", err)
		}
	})
}

// noPanic runs f and turns a panic into an error.
func noPanic(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return f()
}
