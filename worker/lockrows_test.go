package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

// TestLockRowsShowSlots: a resource used WithLimit has a row per held slot,
// naming it, with its nodes counted once per node.
func TestLockRowsShowSlots(t *testing.T) {
	var states []redlock.NodeState
	for slot, tok := range []string{"AAAA", "", "CCCC"} {
		for node := range 3 {
			states = append(states, redlock.NodeState{Node: node, Token: tok, TTL: time.Second, Slot: slot, Limit: 3})
		}
	}
	rows := lockRows([]lockadmin.HeldLock{{Resource: "task:import:acme", Nodes: states}}, nil, 2)
	if len(rows) != 2 {
		t.Fatalf("%d rows for 2 held slots: %+v", len(rows), rows)
	}
	for i, want := range []string{"slot 0", "slot 2"} {
		if rows[i].Slot != want || !strings.HasPrefix(rows[i].Nodes, "3/3") || rows[i].Minority {
			t.Errorf("row %d: %+v, want %s on 3/3 nodes", i, rows[i], want)
		}
	}
}
