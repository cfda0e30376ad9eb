package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestLossGuardHasAFloor: the loss is declared lossGuard before Until, at
// least 50ms for any TTL of 200ms or more (a quarter of shorter ones), which
// is what lets the signal survive a loaded machine's scheduling delays.
func TestLossGuardHasAFloor(t *testing.T) {
	for _, ttl := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, time.Second, 10 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
				l, err := c.TryAcquire(context.Background(), "job", ttl)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range mems {
					m.set(func(m *memNode) { m.err = errMemDown })
				}
				kctx, stop := l.KeepAlive(context.Background())
				defer stop()
				<-kctx.Done()
				ahead := time.Until(l.Until())
				if want := min(50*time.Millisecond, ttl/4); ahead < want {
					t.Fatalf("loss signalled %v before Until, want at least %v", ahead, want)
				}
				if ahead > 500*time.Millisecond {
					t.Fatalf("loss signalled %v before Until: the guard has no ceiling", ahead)
				}
			})
		})
	}
}
