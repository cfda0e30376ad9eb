package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// TestCheckReportsIdentityClockAndSettings: Check tells servers apart by
// run_id (two spellings of one server share it), measures each clock against
// ours within its round trip, flags an evicting policy and a down node.
func TestCheckReportsIdentityClockAndSettings(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	ctx := within(t, 30*time.Second)
	evicting := c.Nodes[1].Client(t)
	if err := evicting.ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := evicting.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	// Node 0 twice: once through its proxy, once at the server's own port.
	clients := []redis.UniversalClient{
		redistest.Client(t, c.Nodes[0].Addr()),
		redistest.Client(t, c.Nodes[0].ServerAddr()),
		redistest.Client(t, c.Nodes[1].Addr()),
		redistest.Client(t, c.Nodes[2].Addr()),
	}
	lc, err := redlock.New(clients, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	reps, err := lc.Admin().Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps[:3] {
		if r.Err != nil || r.RunID == "" || r.Version == "" {
			t.Fatalf("node %d (%s): run_id %q version %q err %v", r.Node, r.Addr, r.RunID, r.Version, r.Err)
		}
		// Same machine, same clock: the offset is the measurement's error,
		// at most half the round trip (plus TIME's microsecond resolution).
		if off := r.ClockOffset.Abs(); off > r.RTT/2+time.Millisecond {
			t.Errorf("node %d: clock offset %v beyond what a %v round trip explains", r.Node, r.ClockOffset, r.RTT)
		}
	}
	if reps[0].RunID != reps[1].RunID || reps[0].RunID == reps[2].RunID {
		t.Errorf("run IDs %q %q %q: want the first two equal (one server), the third different", reps[0].RunID, reps[1].RunID, reps[2].RunID)
	}
	evicts := func(r redlock.NodeReport) bool {
		evicting := func(w string) bool { return strings.Contains(w, "can evict lock keys") }
		return slices.ContainsFunc(r.Warnings, evicting)
	}
	if !evicts(reps[2]) || evicts(reps[0]) {
		t.Errorf("evicts: node 0 %v, node 2 %v (%q)", evicts(reps[0]), evicts(reps[2]), reps[2].Warnings)
	}
	if reps[3].Err == nil || reps[3].RunID != "" {
		t.Errorf("killed node: err %v run_id %q, want an error and no identity", reps[3].Err, reps[3].RunID)
	}
}
