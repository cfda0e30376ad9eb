package redistest

import (
	"testing"
	"time"
)

// TestSetClockOffsetStepsTheNodesWallClock: a forward step on one node
// expires its keys early and shows in TIME; the other node is untouched.
func TestSetClockOffsetStepsTheNodesWallClock(t *testing.T) {
	c := StartClockCluster(t, 2)
	ctx := ctxTimeout(t, 20*time.Second)
	a, b := c.Nodes[0].Client(t), c.Nodes[1].Client(t)
	for _, n := range c.Nodes {
		if err := n.Client(t).Set(ctx, "k", "v", 5*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Nodes[0].SetClockOffset(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ta, err := a.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := ta.Sub(now); d < 9*time.Second || d > 11*time.Second {
		t.Fatalf("node 0's TIME is %v from ours, want about +10s", d)
	}
	if n, _ := a.Exists(ctx, "k").Result(); n != 0 {
		t.Fatal("a key with 5s left survived a 10s forward step")
	}
	if n, _ := b.Exists(ctx, "k").Result(); n != 1 {
		t.Fatal("the other node lost its key: its clock moved too")
	}
	if err := c.Nodes[0].Restart(0); err != nil {
		t.Fatal(err)
	}
	if ta, err = a.Time(ctx).Result(); err != nil || time.Until(ta) < 9*time.Second {
		t.Fatalf("after a restart node 0's TIME is %v (err %v), want the offset kept", ta, err)
	}
	if c.Nodes[0].ClockOffset() != 10*time.Second {
		t.Fatalf("ClockOffset() = %v", c.Nodes[0].ClockOffset())
	}
	if err := StartNode(t).SetClockOffset(time.Second); err == nil {
		t.Fatal("SetClockOffset on a node with a real clock succeeded")
	}
}
