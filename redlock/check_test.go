package redlock

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestNodeReportWarnings: each setting that breaks an assumption is named
// with what to change; a safe node has none.
func TestNodeReportWarnings(t *testing.T) {
	safe := NodeReport{MaxmemoryPolicy: "noeviction", Maxmemory: 1 << 30, AppendOnly: true, AppendFsync: "always"}
	cases := []struct {
		name string
		edit func(*NodeReport)
		want []string // substrings, one per warning
	}{
		{"safe", func(*NodeReport) {}, nil},
		{"no limit, any policy", func(r *NodeReport) { r.Maxmemory, r.MaxmemoryPolicy = 0, "allkeys-lru" }, nil},
		{"allkeys-lru", func(r *NodeReport) { r.MaxmemoryPolicy = "allkeys-lru" }, []string{"noeviction"}},
		{"volatile-ttl", func(r *NodeReport) { r.MaxmemoryPolicy = "volatile-ttl" }, []string{"noeviction"}},
		{"everysec", func(r *NodeReport) { r.AppendFsync = "everysec" }, []string{"largest lock TTL"}},
		{"no aof", func(r *NodeReport) { r.AppendOnly = false }, []string{"appendonly no"}},
		{"config refused", func(r *NodeReport) { r.ConfigErr = errors.New("NOPERM") }, []string{"CONFIG GET refused"}},
		{"down", func(r *NodeReport) { r.Err = errors.New("dial") }, nil},
	}
	for _, tc := range cases {
		r := safe
		tc.edit(&r)
		got := r.notes(false)
		if len(got) != len(tc.want) {
			t.Errorf("%s: warnings %q, want %d", tc.name, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: warning %q does not say %q", tc.name, got[i], w)
			}
		}
	}
}

// TestSameServerMarked: Check's reports name, on each node, the other nodes
// that reach its server: equal run IDs, or any shard shared with a Redis
// Cluster node; nodes that did not answer, or whose identity is unknown, are
// never matched; independent nodes get nil.
func TestSameServerMarked(t *testing.T) {
	down := errors.New("down")
	reports := []NodeReport{
		{Node: 0, RunID: "a"},
		{Node: 1, RunID: "b"},
		{Node: 2, RunID: "a"}, // node 0's server
		{Node: 3, Shards: []NodeReport{{RunID: "c"}, {RunID: "b"}}}, // a cluster with node 1's server
		{Node: 4, RunID: ""},            // identity unknown
		{Node: 5, RunID: "", Err: down}, // down
		{Node: 6, Shards: []NodeReport{{RunID: "d"}, {RunID: "a", Err: down}}}, // its shard "a" did not answer
		{Node: 7, RunID: "e"},
		{Node: 8, Shards: []NodeReport{{RunID: "f"}, {RunID: "g"}}}, // two clusters sharing two servers
		{Node: 9, Shards: []NodeReport{{RunID: "g"}, {RunID: "f"}}},
	}
	markSameServer(reports)
	want := [][]int{{2}, {3}, {0}, {1}, nil, nil, nil, nil, {9}, {8}}
	for i, r := range reports {
		if !slices.Equal(r.SameServer, want[i]) {
			t.Errorf("node %d: SameServer %v, want %v", i, r.SameServer, want[i])
		}
	}
}
