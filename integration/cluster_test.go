package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/redis/go-redis/v9"
)

// Lock nodes that are each a Redis Cluster (issue 22): three clusters of
// three shards, configured by redis-cluster:// URLs.

// clusterBraceNames put braces where Redis Cluster reads a hash tag, and
// enough plain names to land on every shard.
func clusterBraceNames() []string {
	names := []string{"{", "}", "}x", "{}", "x{y}z", "a}:fence", "a}", "{a}", "}}", "a}:q", "a{b"}
	for i := range 30 {
		names = append(names, fmt.Sprintf("sku-%d", i))
	}
	return names
}

// newClusterLocks is a client over cluster lock nodes with a patient node
// timeout (a loaded machine; these tests are not about timing).
func newClusterLocks(t *testing.T, urls []string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.NewFromURLs(urls, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestClusterLockNodes(t *testing.T) {
	urls, addrs := redistest.StartLockClusters(t, 3, 3)
	c := newClusterLocks(t, urls)
	t.Run("names with braces", func(t *testing.T) { clusterBraceNamesCase(t, c) })
	t.Run("waiter on a hashed name", func(t *testing.T) { clusterWaiterCase(t, c) })
	t.Run("scripts on every master", func(t *testing.T) { clusterScriptsCase(t, addrs) })
	t.Run("listing", func(t *testing.T) { clusterListCase(t, c) })
	t.Run("FIFO across clients", func(t *testing.T) { clusterFIFOCase(t, urls, addrs) })
	t.Run("waiter subscribed on another shard", func(t *testing.T) { clusterCrossShardWakeCase(t, urls, addrs) })
	t.Run("fences over every shard", func(t *testing.T) { clusterFencesCase(t, c, addrs) })
	t.Run("check per shard", func(t *testing.T) { clusterCheckCase(t, urls, addrs) })
}

// clusterBraceNamesCase: every name is taken (fenced), refused to a second
// caller, released (no CROSSSLOT) and taken again with a larger fence.
func clusterBraceNamesCase(t *testing.T, c *redlock.Client) {
	ctx := context.Background()
	for _, name := range clusterBraceNames() {
		l, err := c.TryAcquire(ctx, name, 30*time.Second, redlock.WithFencing())
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if _, err := c.TryAcquire(ctx, name, 30*time.Second); !errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("%q: second caller got %v, want ErrLocked", name, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%q: release: %v", name, err)
		}
		l2, err := c.TryAcquire(ctx, name, 30*time.Second, redlock.WithFencing())
		if err != nil || l2.Fence() <= l.Fence() {
			t.Fatalf("%q: again: %v, fence %d after %d", name, err, l2.Fence(), l.Fence())
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatalf("%q: second release: %v", name, err)
		}
	}
}

// clusterWaiterCase: a waiter on a name with '}' joins the queue (a
// multi-key script) and gets the lock when it is released.
func clusterWaiterCase(t *testing.T, c *redlock.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"}x", "a}:fence", "plain"} {
		held, err := c.Acquire(ctx, name, 30*time.Second, redlock.WithFencing())
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := c.Acquire(ctx, name, 30*time.Second, redlock.WithFencing())
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		// Give the waiter time to queue (a multi-key script): the test
		// holds either way, but proves the queue only if it did.
		time.Sleep(300 * time.Millisecond)
		if err := held.Release(ctx); err != nil {
			t.Fatalf("%q: release: %v", name, err)
		}
		if err := <-got; err != nil {
			t.Fatalf("%q: waiter: %v", name, err)
		}
	}
}

// clusterScriptsCase: after the cases above, every master of every lock node
// loaded the scripts and none answered NOSCRIPT.
func clusterScriptsCase(t *testing.T, addrs [][]string) {
	ctx := context.Background()
	for _, cluster := range addrs {
		for _, a := range cluster {
			cl := redis.NewClient(redistest.ClientOptions(a))
			stats, err := cl.Info(ctx, "commandstats", "errorstats").Result()
			_ = cl.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(stats, "cmdstat_script|load:") || strings.Contains(stats, "errorstat_NOSCRIPT") {
				t.Fatalf("master %s: scripts not preloaded:\n%s", a, stats)
			}
		}
	}
}

// clusterListCase: the operator's listing finds held locks of both key
// forms on every shard, and no fence or queue key.
func clusterListCase(t *testing.T, c *redlock.Client) {
	ctx := context.Background()
	names := clusterBraceNames()
	for _, name := range names {
		l, err := c.TryAcquire(ctx, name, 30*time.Second, redlock.WithFencing())
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		defer func() { _ = l.Release(ctx) }()
	}
	listed, _, err := c.Admin().Scan(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	listed = slices.Compact(listed)
	slices.Sort(names)
	if !slices.Equal(listed, names) {
		t.Fatalf("listed %q, want %q", listed, names)
	}
}

// clusterFencesCase: 300 fenced acquisitions, round-robin over names whose
// keys lie on every shard of every node (and names with '}'), each fence
// larger than the one before it for its name.
func clusterFencesCase(t *testing.T, c *redlock.Client, addrs [][]string) {
	ctx := within(t, 2*time.Minute)
	names := append(redistest.SpreadNames(t, addrs, "fence-", clusterKey), "fence-}a", "}fence-b")
	last := map[string]int64{}
	for i := range 300 {
		name := names[i%len(names)]
		l, err := c.Acquire(ctx, name, 30*time.Second, redlock.WithFencing())
		if err != nil {
			t.Fatalf("acquisition %d of %q: %v", i, name, err)
		}
		if l.Fence() <= last[name] {
			t.Fatalf("acquisition %d of %q: fence %d after %d", i, name, l.Fence(), last[name])
		}
		last[name] = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %d of %q: %v", i, name, err)
		}
	}
}

// clusterCheckCase: Check reports every shard of every node, with distinct
// identities; an evicting shard is named; a second URL to one cluster (by
// another seed) is caught as the same servers.
func clusterCheckCase(t *testing.T, urls []string, addrs [][]string) {
	ctx := context.Background()
	evicting := addrs[1][2]
	cl := redis.NewClient(redistest.ClientOptions(evicting))
	defer cl.Close()
	if err := cl.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ConfigSet(ctx, "maxmemory", "1gb").Err(); err != nil {
		t.Fatal(err)
	}
	defer cl.ConfigSet(ctx, "maxmemory", "0")
	c := newClusterLocks(t, urls)
	reports, err := c.Admin().Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reports {
		if r.Err != nil || len(r.Shards) != 3 {
			t.Fatalf("node %d: %v, %d shards", i, r.Err, len(r.Shards))
		}
		for _, s := range r.Shards {
			if !slices.Contains(addrs[i], s.Addr) || s.RunID == "" {
				t.Fatalf("node %d: shard %+v not one of %v", i, s, addrs[i])
			}
		}
	}
	warned := strings.Join(reports[1].Warnings, "\n")
	if !strings.Contains(warned, evicting) || !strings.Contains(warned, "allkeys-lru") {
		t.Fatalf("node 1 warnings %q do not name shard %s", warned, evicting)
	}
	if g := sharingServer(reports); len(g) != 0 {
		t.Fatalf("independent clusters report shared servers: %v", g)
	}
	twice := []string{urls[0], urls[1], redistest.LockClusterURL([]string{addrs[0][2]})}
	if _, err := redlock.NewFromURLs(twice, redlock.WithNodeTimeout(time.Second)); !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("NewFromURLs with one cluster listed twice: %v, want ErrSameServer", err)
	}
	// The operator's check keeps such nodes to report them.
	again := newClusterLocks(t, twice, redlock.WithInspectOnly())
	reports, err = again.Admin().Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := sharingServer(reports); len(g) != 1 || !slices.Equal(g[0], []int{0, 2}) {
		t.Fatalf("one cluster listed twice: groups %v, want nodes 0 and 2 as one", g)
	}
}

// sharingServer groups the nodes whose reports share a server's run ID
// (a single server's, or any shard's): what the operator's check judges
// from these reports (its judgement: worker/internal/lockadmin's tests).
func sharingServer(reports []redlock.NodeReport) [][]int {
	ids := make([][]string, len(reports))
	for i, r := range reports {
		if r.Shards == nil && r.RunID != "" {
			ids[i] = []string{r.RunID}
		}
		for _, s := range r.Shards {
			if s.RunID != "" {
				ids[i] = append(ids[i], s.RunID)
			}
		}
	}
	var groups [][]int
	seen := make([]bool, len(reports))
	for i := range reports {
		group := []int{i}
		for j := i + 1; j < len(reports); j++ {
			if !seen[j] && slices.ContainsFunc(ids[j], func(id string) bool { return slices.Contains(ids[i], id) }) {
				group, seen[j] = append(group, j), true
			}
		}
		if len(group) > 1 && !seen[i] {
			groups = append(groups, group)
		}
	}
	return groups
}

// TestClusterMemberAsSingleServer: a redis:// URL naming one master of a
// cluster is refused by NewFromURLs and by the worker at start, and warned
// by Check with the URL to write.
func TestClusterMemberAsSingleServer(t *testing.T) {
	addrs := redistest.StartRedisCluster(t, 3)
	plain := redistest.StartCluster(t, 2)
	urls := append(plain.URLs(), "redis://"+addrs[0])
	if _, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)); !errors.Is(err, redlock.ErrInvalid) ||
		!strings.Contains(err.Error(), "redis-cluster://"+addrs[0]) {
		t.Fatalf("NewFromURLs with a cluster member as redis://: %v, want ErrInvalid naming the cluster form", err)
	}
	// The operator's check keeps such a node to report it.
	c := newClusterLocks(t, urls, redlock.WithInspectOnly())
	reports, err := c.Admin().Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// What the operator's check judges (its message is tested by worker/cmd/asynqlock TestClusterNodes).
	if r := reports[2]; !r.ClusterEnabled || r.Shards != nil || r.Err != nil {
		t.Fatalf("node 2's report %+v: want a cluster member reported as a single server", r)
	}
	// Used anyway, its MOVED answers name the fix.
	hinted := false
	for i := 0; i < 30 && !hinted; i++ {
		l, err := c.TryAcquire(context.Background(), fmt.Sprintf("r%d", i), 10*time.Second)
		if err == nil {
			states, _ := c.Inspect(context.Background(), l.Resource())
			_ = l.Release(context.Background())
			hinted = states[2].Err != nil && strings.Contains(states[2].Err.Error(), "write the node as redis-cluster://"+addrs[0])
			continue
		}
		hinted = strings.Contains(err.Error(), "MOVED") && strings.Contains(err.Error(), "redis-cluster://"+addrs[0])
	}
	if !hinted {
		t.Fatal("no MOVED answer named the cluster form")
	}
	broker := redistest.StartNode(t)
	cfg, err := worker.LoadConfigFrom(map[string]string{
		"ASYNQ_REDIS_URL": broker.URL(), "REDLOCK_NODES": strings.Join(urls, ","), "REDLOCK_NODE_TIMEOUT": "1s",
		"METRICS_ADDR": "127.0.0.1:0", "LOG_LEVEL": "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.New(cfg, worker.WithLogger(slog.New(slog.DiscardHandler))); err == nil || !strings.Contains(err.Error(), "redis-cluster://"+addrs[0]) {
		t.Fatalf("worker.New = %v, want a refusal naming redis-cluster://%s", err, addrs[0])
	}
}
