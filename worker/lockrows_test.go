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
	for i, want := range []string{"slot 0/3", "slot 2/3"} {
		if rows[i].Slot != want || !strings.HasPrefix(rows[i].Nodes, "3/3") || rows[i].Minority {
			t.Errorf("row %d: %+v, want %s on 3/3 nodes", i, rows[i], want)
		}
	}
}

// TestLockRowsShowALimitChanging: while holders of limits 3 and 5 share a
// resource, each slot's row names the limit in force and both limits.
func TestLockRowsShowALimitChanging(t *testing.T) {
	var states []redlock.NodeState
	for slot, tok := range []string{"AAAA", "", "", "", "EEEE"} {
		for node := range 3 {
			states = append(states, redlock.NodeState{Node: node, Token: tok, TTL: time.Second, Slot: slot, Limit: 5, Limits: []int{3, 5}})
		}
	}
	rows := lockRows([]lockadmin.HeldLock{{Resource: "task:import:acme", Nodes: states}}, nil, 2)
	for i, want := range []string{"slot 0/5, changing: limits 3 and 5", "slot 4/5, changing: limits 3 and 5"} {
		if i >= len(rows) || rows[i].Slot != want {
			t.Fatalf("rows %+v, want row %d to say %q", rows, i, want)
		}
	}
}
