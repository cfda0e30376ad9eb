package redlock

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// TestLookUpRefreshedWhenTheChainStarts: a caller that started to wait
// while another process held the lock (its look-up is older than the round
// that gave the lock to this Client) still gets an early hand-over: the
// round's lock sends the waiters' look-ups again. Without that, every such
// hand-over waited for its round (10ms here).
func TestLookUpRefreshedWhenTheChainStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, mems := memClient(t, 3)
		other := memClientOver(t, mems)
		o, err := other.Acquire(ctx, "r", time.Minute, withCompletion("O", time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		chA := waitFor(ctx, c, "r", time.Minute, withCompletion("A", time.Hour))
		synctest.Wait()
		chB := waitFor(ctx, c, "r", time.Minute, withCompletion("B", time.Hour))
		synctest.Wait() // B waits behind A, its look-up answered
		time.Sleep(time.Millisecond)
		_ = o.Release(ctx)
		a := <-chA // A's own round: a new chain, later than B's first look-up
		if a.err != nil {
			t.Fatal(a.err)
		}
		synctest.Wait() // B's look-up sent again, answered
		for _, m := range mems {
			m.set(func(m *memNode) { m.delay = 10 * time.Millisecond })
		}
		released := time.Now()
		go func() { _ = a.l.Release(ctx) }()
		b := <-chB
		if b.err != nil {
			t.Fatal(b.err)
		}
		if d := b.at.Sub(released); d != 0 {
			t.Errorf("B started %v after A's release, want at once (an early hand-over)", d)
		}
		_ = b.l.Release(ctx)
	})
}

// memClientOver is a second Client (another process) over mems.
func memClientOver(t *testing.T, mems []*memNode) *Client {
	t.Helper()
	nodes := make([]*transport.Node, len(mems))
	for i, m := range mems {
		nodes[i] = transport.NewNode(i, fmt.Sprintf("mem%d", i), nil, transportEnv)
		nodes[i].Do = m.do
	}
	c := start(defaultConfig(), nodes, nil)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
