package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
)

// TestBareBrokerKeepsWorkersForColdKeys: the README's middleware as written
// (WithBroker, no Room) on one server of 4 workers, a hot SKU held by
// another client for 6s with 12 tasks queued for it, then 6 cold 100ms
// tasks. By default the busy tasks wait in at most two thirds of the
// workers and park past that, so the cold tasks finish in under half the
// time they take when every busy task may wait in a worker (the control: a
// Room of no places, the middleware's default before). Nothing is lost or
// run twice in either.
func TestBareBrokerKeepsWorkersForColdKeys(t *testing.T) {
	coldDone := func(t *testing.T, opts ...middleware.Option) time.Duration {
		nodes := redistest.StartCluster(t, 3)
		broker, store := redistest.StartNode(t), redistest.StartNode(t)
		inv := newInventory(t, store, 100*time.Millisecond)
		ctx := context.Background()
		held, err := lockClient(t, nodes).TryAcquire(ctx, "task:stock:adjust:HOT", 6*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		opts = append([]middleware.Option{middleware.WithBroker(brokerClient(t, broker))}, opts...)
		startServer(t, broker, serverConfig(4), middleware.Lock(lockClient(t, nodes), middleware.ByField("sku"), opts...)(inv))
		var hot, cold []adjustment
		expected := map[string]int64{"HOT": 12}
		for i := range 12 {
			hot = append(hot, adjustment{ID: i, SKU: "HOT", Delta: 1})
		}
		for i := range 6 {
			sku := fmt.Sprintf("COLD-%d", i)
			cold = append(cold, adjustment{ID: 12 + i, SKU: sku, Delta: 1})
			expected[sku] = 1
		}
		c := asynqClient(t, broker)
		enqueueAdjustments(t, c, hot)
		time.Sleep(300 * time.Millisecond) // the hot tasks meet their lock busy first
		start := time.Now()
		enqueueAdjustments(t, c, cold)
		waitFor(t, "cold tasks done", func() bool {
			inv.mu.Lock()
			defer inv.mu.Unlock()
			for _, a := range cold {
				if inv.applied[a.ID] == 0 {
					return false
				}
			}
			return true
		})
		took := time.Since(start)
		_ = held.Release(ctx)
		inv.waitDone(t, 18, 2*time.Minute)
		checkAppliedOnce(t, inv, 18, expected)
		return took
	}
	var def, control time.Duration
	t.Run("default", func(t *testing.T) { def = coldDone(t) })
	t.Run("control", func(t *testing.T) { control = coldDone(t, middleware.WithRoom(0, 0)) })
	t.Logf("6 cold tasks done after %v by default, %v when busy tasks may wait in every worker", def, control)
	if t.Failed() {
		return
	}
	if def*2 >= control {
		t.Fatalf("cold tasks took %v by default, not under half the %v they take when busy tasks wait in every worker", def, control)
	}
}
