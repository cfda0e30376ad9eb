package redlock

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
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

// TestClusterNodeFollowsMoved: with a single redirection allowed
// (tuneClusterForLocking), a cluster lock node still follows a slot that
// moved to another shard (MOVED) within the call that met it, both ways.
func TestClusterNodeFollowsMoved(t *testing.T) {
	addrs := redistest.StartRedisCluster(t, 2)
	urls := append([]string{redistest.LockClusterURL(addrs)}, redistest.StartCluster(t, 2).URLs()...)
	c, err := NewFromURLs(urls, WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shards := make([]*redis.Client, 2)
	ids := make([]string, 2)
	for i, a := range addrs {
		shards[i] = redis.NewClient(redistest.ClientOptions(a))
		defer shards[i].Close()
		if ids[i], err = shards[i].ClusterMyID(ctx).Result(); err != nil {
			t.Fatal(err)
		}
	}
	const res = "moved"
	slot, err := shards[0].ClusterKeySlot(ctx, res).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := 0
	if slot >= 16384/2 {
		owner = 1 // StartRedisCluster's equal ranges
	}
	nodeZeroHoldsOnce(ctx, t, c, res, "before the move")
	for range 2 {
		owner = 1 - owner
		for _, s := range shards {
			if err := s.Do(ctx, "cluster", "setslot", slot, "node", ids[owner]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		nodeZeroHoldsOnce(ctx, t, c, res, "slot moved to "+addrs[owner])
	}
}

// nodeZeroHoldsOnce acquires resource, checks that node 0 holds it, and
// releases it.
func nodeZeroHoldsOnce(ctx context.Context, t *testing.T, c *Client, resource, when string) {
	t.Helper()
	l, err := c.TryAcquire(ctx, resource, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	states, err := c.Inspect(ctx, resource)
	if err != nil || states[0].Token != l.Token() {
		t.Fatalf("%s: node 0 does not hold %q: %v %+v", when, resource, err, states)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("%s: release: %v", when, err)
	}
	// Release answers at a majority; node 0 runs its calls in order, so its
	// answer to Inspect comes after its release ran: the slot is not moved
	// while the release is on its way to the old owner.
	if states, err = c.Inspect(ctx, resource); err != nil || states[0].Token == l.Token() {
		t.Fatalf("%s: node 0 still holds %q after the release: %v %+v", when, resource, err, states)
	}
}

// TestClusterDeadShardCost: once the shard master a cluster lock node warmed
// up on refuses connections, a batch to it makes two attempts (one retry,
// tuneClusterForLocking): a lone command dials it twice, a pipeline four
// times (go-redis dials its pipeline pool, then the main pool). go-redis's
// default of three retries made every batch to a dead or unreachable shard
// pay four attempts of dials or read timeouts while the node's other calls
// waited behind it.
func TestClusterDeadShardCost(t *testing.T) {
	live := redistest.StartNode(t)
	dead := redistest.ClosedAddr(t)
	var master atomic.Value
	master.Store(live.Addr())
	var dials atomic.Int32
	o := &redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: master.Load().(string)}}}}, nil
		},
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if samePort(addr, dead) {
				dials.Add(1)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	tuneClusterForLocking(o, time.Second)
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	n := transport.NewNode(0, "cluster", cc, transportEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	warm := redis.NewCmd(ctx, "set", "k", "v")
	if n.Do(ctx, []*redis.Cmd{warm}); warm.Err() != nil {
		t.Fatal(warm.Err())
	}
	master.Store(dead) // the shard's master died and the map says so
	for ctx.Err() == nil {
		if m, err := cc.MasterForKey(ctx, "k"); err == nil && samePort(m.Options().Addr, dead) {
			break
		}
		cc.ReloadState(ctx)
		time.Sleep(10 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatal("the slot map never named the dead master")
	}
	for _, b := range []struct{ size, perAttempt int32 }{{1, 1}, {2, 2}} {
		size, perAttempt := b.size, b.perAttempt
		cmds := make([]*redis.Cmd, size)
		for i := range cmds {
			cmds[i] = redis.NewCmd(ctx, "set", fmt.Sprintf("k%d", i), "v")
		}
		dials.Store(0)
		n.Do(ctx, cmds)
		if cmds[0].Err() == nil || dials.Load() > 2*perAttempt {
			t.Fatalf("a batch of %d to a dead shard: %v after %d dials, want an error after at most %d",
				size, cmds[0].Err(), dials.Load(), 2*perAttempt)
		}
		t.Logf("a batch of %d to a dead shard: %v after %d dials", size, cmds[0].Err(), dials.Load())
	}
}

// samePort compares two loopback addresses by port: go-redis drops the
// loopback host of the addresses a slot map gives (":port").
func samePort(a, b string) bool {
	_, pa, _ := net.SplitHostPort(a)
	_, pb, _ := net.SplitHostPort(b)
	return pa == pb
}
