package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// TestClusterNodes: with lock nodes that are Redis Clusters, list finds
// locks on every shard (names with braces included), show and release reach
// them, and check reports each shard of each node.
func TestClusterNodes(t *testing.T) {
	urls, addrs := redistest.StartLockClusters(t, 3, 2)
	ctx := within(t, 60*time.Second)
	c := holderClient(t, urls)
	// Locks on every shard of every node, and one of the hashed key form.
	names := append(redistest.SpreadNames(t, addrs, "sku-", func(n string) string { return "asynqlock:{" + n + "}" }), "sku-}x")
	for _, r := range names {
		if _, err := c.TryAcquire(ctx, r, time.Minute, redlock.WithFencing()); err != nil {
			t.Fatal(err)
		}
	}
	cli(t, urls, "", "list", "sku-").want(t, 0, "sku-}x", "3/3 (0,1,2)")
	listsExactly(t, urls, names)
	cli(t, urls, "", "show", "sku-}x").want(t, 0, "sku-}x")

	r := cli(t, urls, "", "check", "--json")
	r.want(t, 0)
	var out struct {
		Nodes []checkJSON `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.out), &out); err != nil {
		t.Fatal(err)
	}
	for i, n := range out.Nodes {
		if !n.Reachable || len(n.Shards) != 2 || n.Shards[0].RunID == "" {
			t.Fatalf("node %d: %+v", i, n)
		}
	}
	table := cli(t, urls, "", "check")
	for _, cluster := range addrs {
		table.want(t, 0, cluster...) // a row per shard
	}

	// One cluster given twice, by another seed: the same servers.
	twice := []string{urls[0], urls[1], redistest.LockClusterURL(addrs[0][1:])}
	r = cli(t, twice, "", "check")
	if r.code == 0 || !strings.Contains(r.out, "same run_id") {
		t.Fatalf("one cluster listed twice passed check (exit %d)", r.code)
	}
	// A cluster member given as a single server fails, naming the form.
	member := []string{urls[0], urls[1], "redis://" + addrs[2][0]}
	r = cli(t, member, "", "check")
	if r.code == 0 || !strings.Contains(r.out, "redis-cluster://"+addrs[2][0]) {
		t.Fatalf("a cluster member as redis:// passed check (exit %d)", r.code)
	}
}

// listsExactly: list --json names exactly the resources names, each held on
// every node.
func listsExactly(t *testing.T, urls, names []string) {
	t.Helper()
	r := cli(t, urls, "", "list", "--json")
	r.want(t, 0)
	var listing struct {
		Locks []lockJSON `json:"locks"`
	}
	if err := json.Unmarshal([]byte(r.out), &listing); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, l := range listing.Locks {
		held := 0
		for _, n := range l.Nodes {
			if n.Held {
				held++
			}
		}
		if held != len(urls) {
			t.Fatalf("%s held on %d of %d nodes: %+v", l.Resource, held, len(urls), l.Nodes)
		}
		listed = append(listed, l.Resource)
	}
	slices.Sort(listed)
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(listed, want) {
		t.Fatalf("list names %q, want %q (a lock on every shard)", listed, want)
	}
}
