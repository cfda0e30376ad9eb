package lockadmin

import (
	"testing"
	"time"
)

// TestQuorumAndPing: the quorum is a majority, and the ping reaches every
// node of the client it is given.
func TestQuorumAndPing(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3} {
		if got := Quorum(n); got != want {
			t.Errorf("Quorum(%d) = %d, want %d", n, got, want)
		}
	}
	ctx := within(t, 20*time.Second)
	c, _, _ := embeddedNodes(t, 5)
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
