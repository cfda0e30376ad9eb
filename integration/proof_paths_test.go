package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
)

// TestProofAlternatingPaths: the contention workload alternates calm phases,
// where most locks meet a free resource and take the plain one-round path,
// with busy ones, where waiters queue on the nodes and locks are handed
// over, on the same resources; so the switch between the uncontended path
// and the waiter queue is checked by the history checker, with a node killed
// or paused while it goes on. Both paths must have been taken.
func TestProofAlternatingPaths(t *testing.T) {
	tests := []struct {
		name, fault string
		steps       []faultStep
	}{
		{name: "none", fault: "none"},
		{
			name: "kill", fault: "node 5 SIGKILLed at +1.2s, stays down",
			steps: []faultStep{{At: 1200 * time.Millisecond, What: "SIGKILL node 5", Do: func(c *redistest.Cluster) error { return c.Nodes[4].Kill() }}},
		},
		{
			name: "sigstop", fault: "node 4 SIGSTOPped at +0.7s, SIGCONT at +2.2s",
			steps: []faultStep{
				{At: 700 * time.Millisecond, What: "SIGSTOP node 4", Do: func(c *redistest.Cluster) error { return c.Nodes[3].Stop() }},
				{At: 2200 * time.Millisecond, What: "SIGCONT node 4", Do: func(c *redistest.Cluster) error { return c.Nodes[3].Cont() }},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := startProofEnv(t)
			load := proofContention(4*time.Second, tt.steps...)
			load.Phase, load.Think = 500*time.Millisecond, [2]time.Duration{20 * time.Millisecond, 60 * time.Millisecond}
			out := runContention(t, env, load)
			note := fmt.Sprintf("calm and busy phases of 500ms alternate: %d locks decided by their first round, %d after queueing",
				out.Stats.FirstRound, out.Stats.Retried)
			t.Log(note)
			checkProofScenario(t, alternatingScenario, tt.fault, note, out)
			if out.Stats.FirstRound < 20 || out.Stats.Retried < 20 {
				t.Fatalf("%d first-round and %d queued acquisitions: the run did not exercise both paths", out.Stats.FirstRound, out.Stats.Retried)
			}
		})
	}
}

const alternatingScenario = "calm/busy phases: 4 processes × 3 goroutines, 4 resources, 5 nodes"
