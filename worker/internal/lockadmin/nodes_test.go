package lockadmin

import (
	"testing"
	"time"
)

// TestNodesQuorumAndPing: the operator calls reach the client they are given.
func TestNodesQuorumAndPing(t *testing.T) {
	ctx := within(t, 20*time.Second)
	c, _, _ := embeddedNodes(t, 5)
	if Nodes(c) != 5 || Quorum(c) != 3 {
		t.Fatalf("nodes %d quorum %d, want 5 and 3", Nodes(c), Quorum(c))
	}
	st, err := PingNodes(ctx, c)
	if err != nil || len(st) != 5 {
		t.Fatalf("PingNodes: %v, %v", st, err)
	}
	for i, s := range st {
		if s.Node != i || s.Err != nil || s.Addr == "" {
			t.Errorf("node %d: %+v", i, s)
		}
	}
}
