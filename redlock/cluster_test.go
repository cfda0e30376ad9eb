package redlock

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSummarizeShards: a cluster node's report lists every shard's run_id,
// takes the farthest clock and the settings of a shard that breaks an
// assumption, fails when a shard fails, and warns per shard.
func TestSummarizeShards(t *testing.T) {
	ok := func(addr, id string, off time.Duration) NodeReport {
		return NodeReport{Addr: addr, RunID: id, Version: "7.0", ClockOffset: off, AppendOnly: true, AppendFsync: "always", MaxmemoryPolicy: "noeviction", ClusterEnabled: true}
	}
	evicting := ok("b:1", "B", -30*time.Millisecond)
	evicting.Maxmemory, evicting.MaxmemoryPolicy = 1<<30, "allkeys-lru"
	var r NodeReport
	summarize(&r, []NodeReport{ok("a:1", "A", time.Millisecond), evicting, ok("c:1", "C", 2*time.Millisecond)})
	if r.RunID != "A,B,C" || r.Version != "7.0" || r.ClockOffset != -30*time.Millisecond || r.Err != nil {
		t.Fatalf("summary %+v", r)
	}
	if !r.evicts() || !r.survivesRestart() {
		t.Fatalf("settings: evicts %v, survives restart %v", r.evicts(), r.survivesRestart())
	}
	w := r.Warnings()
	if len(w) != 1 || !strings.HasPrefix(w[0], "shard b:1: maxmemory-policy allkeys-lru") {
		t.Fatalf("warnings %q", w)
	}

	down := NodeReport{Addr: "c:1", Err: errors.New("refused")}
	r = NodeReport{}
	summarize(&r, []NodeReport{ok("a:1", "A", 0), down})
	if r.Err == nil || !strings.Contains(r.Err.Error(), "shard c:1") || r.RunID != "A" {
		t.Fatalf("a shard down: %+v", r)
	}
	if w := r.Warnings(); len(w) != 1 || !strings.Contains(w[0], "shard c:1 unreachable") {
		t.Fatalf("warnings %q", w)
	}
}

// TestClusterMemberWarned: a single server reporting cluster_enabled is
// warned with the URL to write.
func TestClusterMemberWarned(t *testing.T) {
	w := NodeReport{Addr: "m:7000", ClusterEnabled: true}.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "redis-cluster://m:7000") {
		t.Fatalf("warnings %q", w)
	}
}
