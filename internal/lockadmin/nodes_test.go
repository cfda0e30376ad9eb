package lockadmin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// TestNodesQuorumAndPing: the hooks reach the client they are given.
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

// TestTuningOptionsReachTheClient: the knobs outside the public API are
// validated like any option.
func TestTuningOptionsReachTheClient(t *testing.T) {
	_, err := redlock.NewFromURLs([]string{"redis://127.0.0.1:1"}, redlock.WithNodeTimeout(20*time.Millisecond), WithBatchWindow(6*time.Millisecond))
	if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), "batch window") {
		t.Fatalf("a batch window above a quarter of the node timeout: %v, want ErrInvalid naming it", err)
	}
	c, err := redlock.NewFromURLs([]string{"redis://127.0.0.1:1"}, WithLocalQueue(false), WithBatchWindow(0))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}
