package redlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestClusterNodeFollowsMovedShard: a cluster lock node whose only shard
// master dies after the cluster moved its slots to another server (a
// failover, told by the slot map of go-redis's ClusterSlots option) grants
// locks again soon after its first call fails on the dead address.
// go-redis reloads a slot map on its own only on MOVED, ASK or READONLY
// answers, or once the map is ClusterStateReloadInterval (60s) old: before
// the lock node reloaded it on connection failures, this took a minute.
func TestClusterNodeFollowsMovedShard(t *testing.T) {
	start := time.Now()
	phase := func(format string, args ...any) {
		t.Logf("%5.2fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	dead, promoted := redistest.StartNode(t), redistest.StartNode(t)
	var master atomic.Value
	master.Store(dead.Addr())
	var loads atomic.Int32
	o := &redis.ClusterOptions{ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
		loads.Add(1)
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: master.Load().(string)}}}}, nil
	}}
	tuneClusterForLocking(o, time.Second)
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	plain := redistest.StartCluster(t, 2).Clients(t)
	c, err := New(append([]redis.UniversalClient{cc}, plain...), WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n := nodeZeroHolds(ctx, t, c, "before"); n != 0 {
		t.Fatalf("node 0 refused %d times before the failover", n)
	}
	phase("node 0 holds; slot map loaded %d times", loads.Load())

	master.Store(promoted.Addr())
	dead.Refuse()
	phase("the shard's master refuses connections; the cluster moved its slots to %s", promoted.Addr())
	bound, cancelBound := context.WithTimeout(ctx, 10*time.Second)
	defer cancelBound()
	n := nodeZeroHolds(bound, t, c, "after")
	if bound.Err() != nil {
		t.Fatalf("node 0 still refuses locks 10s after its shard moved (%d refusals, slot map loaded %d times)", n, loads.Load())
	}
	phase("node 0 holds again after %d refusals; slot map loaded %d times", n, loads.Load())
}

// nodeZeroHolds acquires and releases resources prefix-0 to prefix-9 until
// node 0 held each of them, or ctx ends; it returns how many times node 0
// did not hold one.
func nodeZeroHolds(ctx context.Context, t *testing.T, c *Client, prefix string) (refused int) {
	t.Helper()
	for i := 0; i < 10 && ctx.Err() == nil; {
		name := fmt.Sprintf("%s-%d", prefix, i)
		l, err := c.TryAcquire(ctx, name, 10*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("%q: %v", name, err)
		}
		states, err := c.Inspect(ctx, name)
		if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil {
			t.Fatalf("release %q: %v", name, rerr)
		}
		if err == nil && states[0].Token == l.Token() {
			i++
			continue
		}
		refused++
		time.Sleep(50 * time.Millisecond)
	}
	return refused
}
