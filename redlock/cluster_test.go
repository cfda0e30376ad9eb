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
	w := r.notes(false)
	if len(w) != 1 || !strings.HasPrefix(w[0], "shard b:1: maxmemory-policy allkeys-lru") {
		t.Fatalf("warnings %q", w)
	}

	// The evicting shard is a problem, named, even behind another shard's
	// persistence note; the note is none.
	volatile := ok("a:0", "A0", 0)
	volatile.AppendOnly = false
	r = NodeReport{}
	summarize(&r, []NodeReport{volatile, ok("a:1", "A", 0), evicting})
	if w := r.notes(false); len(w) != 2 || !strings.HasPrefix(w[0], "shard a:0: writes are lost") {
		t.Fatalf("warnings %q", w)
	}
	p := r.notes(true)
	if len(p) != 1 || !strings.HasPrefix(p[0], "shard b:1: maxmemory-policy allkeys-lru") {
		t.Fatalf("problems %q, want the evicting shard's", p)
	}

	down := NodeReport{Addr: "c:1", Err: errors.New("refused")}
	r = NodeReport{}
	summarize(&r, []NodeReport{ok("a:1", "A", 0), down})
	if r.Err == nil || !strings.Contains(r.Err.Error(), "shard c:1") || r.RunID != "A" {
		t.Fatalf("a shard down: %+v", r)
	}
	if w := r.notes(false); len(w) != 1 || !strings.Contains(w[0], "shard c:1 unreachable") {
		t.Fatalf("warnings %q", w)
	}
	if p := r.notes(true); len(p) != 0 {
		t.Fatalf("problems %q: a shard down is the report's error, not a setting to fix", p)
	}
}

// TestProblemsOfAServer: of a single server's warnings, a policy that
// evicts lock keys and a misconfiguration are problems; persistence
// without fsync on every write is not.
func TestProblemsOfAServer(t *testing.T) {
	r := NodeReport{Addr: "a:1", MaxmemoryPolicy: "noeviction", AppendFsync: "everysec"}
	if w, p := r.notes(false), r.notes(true); len(w) != 1 || len(p) != 0 {
		t.Fatalf("persistence only: warnings %q, problems %q", w, p)
	}
	r.Maxmemory, r.MaxmemoryPolicy = 1<<30, "volatile-lru"
	if p := r.notes(true); len(p) != 1 || !strings.HasPrefix(p[0], "maxmemory-policy volatile-lru") {
		t.Fatalf("evicting: problems %q", p)
	}
	r.Misconfigured = errors.New("scripts refused")
	if p := r.notes(true); len(p) != 1 || p[0] != "scripts refused" {
		t.Fatalf("misconfigured: problems %q", p)
	}
}

// TestClusterMemberWarned: a single server reporting cluster_enabled is
// warned with the URL to write.
func TestClusterMemberWarned(t *testing.T) {
	w := NodeReport{Addr: "m:7000", ClusterEnabled: true}.notes(false)
	if len(w) != 1 || !strings.Contains(w[0], "redis-cluster://m:7000") {
		t.Fatalf("warnings %q", w)
	}
}
