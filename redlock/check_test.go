package redlock

import (
	"errors"
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
		got := r.Warnings()
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
