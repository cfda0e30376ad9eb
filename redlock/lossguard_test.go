package redlock

import (
	"context"
	"errors"
	"sync"
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

// TestLossSignalBeforeUntilInRealTime: in real time, with the race detector
// and the rest of the suite loading the machine, the keep-alive contexts of
// 16 holders whose nodes all failed at once are cancelled, with
// ErrLockLost, before Until.
func TestLossSignalBeforeUntilInRealTime(t *testing.T) {
	const ttl, holders, rounds = time.Second, 16, 2

	c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	late, worst := 0, -ttl
	for range rounds {
		for _, m := range mems {
			m.set(func(m *memNode) { m.err = nil })
		}
		var wg sync.WaitGroup
		for i := range holders {
			l, err := c.Acquire(ctx, "job-"+string(rune('a'+i)), ttl)
			if err != nil {
				t.Fatal(err)
			}
			kctx, stopKA := l.KeepAlive(ctx)
			wg.Go(func() {
				defer stopKA()
				<-kctx.Done()
				at := time.Now()
				if !errors.Is(context.Cause(kctx), ErrLockLost) {
					t.Errorf("keep-alive ended with %v, want ErrLockLost", context.Cause(kctx))
				}
				mu.Lock()
				defer mu.Unlock()
				if d := at.Sub(l.Until()); d > 0 {
					late++
					worst = max(worst, d)
				} else {
					worst = max(worst, d)
				}
			})
		}
		for _, m := range mems {
			m.set(func(m *memNode) { m.err = errMemDown })
		}
		wg.Wait()
	}
	if late > 0 {
		t.Fatalf("%d of %d holders saw the loss after Until (worst %v late; guard %v)", late, holders*rounds, worst, lossGuard(ttl))
	}
	t.Logf("all %d holders saw the loss before Until (closest %v before; guard %v)", holders*rounds, -worst, lossGuard(ttl))
}
