package lockadmin

import (
	"errors"
	"strings"
	"testing"

	"github.com/asynqlock/asynqlock/redlock"
)

// shards is a cluster node's report with one shard per run ID.
func shards(node int, ids ...string) redlock.NodeReport {
	r := redlock.NodeReport{Node: node, Addr: "cluster", RunID: strings.Join(ids, ",")}
	for _, id := range ids {
		r.Shards = append(r.Shards, redlock.NodeReport{Node: node, Addr: id + ":1", RunID: id})
	}
	return r
}

// TestClusterAsSingle: only a node given as a single server that reports
// cluster_enabled is named, with the URL to write.
func TestClusterAsSingle(t *testing.T) {
	c := shards(0, "A")
	c.ClusterEnabled = true
	reports := []redlock.NodeReport{c, {Node: 1, Addr: "b:1"}, {Node: 2, Addr: "m:7000", ClusterEnabled: true}}
	err := ClusterAsSingle(reports)
	if !errors.Is(err, ErrClusterAsSingle) || !strings.Contains(err.Error(), "node 2 (m:7000): write redis-cluster://m:7000") || strings.Contains(err.Error(), "node 0") {
		t.Fatalf("ClusterAsSingle = %v", err)
	}
	if err := ClusterAsSingle(reports[:2]); err != nil {
		t.Fatalf("no member given as a single server: %v", err)
	}
}
