package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunReleasesOnPanic: a panicking fn does not keep the lock.
func TestRunReleasesOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(10*time.Millisecond))
		var token string
		func() {
			defer func() {
				if recover() == nil {
					t.Error("panic swallowed")
				}
			}()
			_ = c.Run(context.Background(), "r", time.Minute, func(ctx context.Context) error {
				st, _ := c.Inspect(ctx, "r")
				token = st[0].Token
				panic("bug")
			})
		}()
		synctest.Wait()
		if token == "" || holders(c, mems, "r", token) != 0 {
			t.Fatalf("lock %q still held after fn panicked", token)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "r", time.Minute)
		if err != nil {
			t.Fatalf("local queue stuck after the panic: %v", err)
		}
		_ = l.Release(context.Background())
	})
}
