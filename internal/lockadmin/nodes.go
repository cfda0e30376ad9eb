package lockadmin

import (
	"context"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockhook"
	"github.com/asynqlock/asynqlock/redlock"
)

// NodeStatus is one node's answer to PingNodes.
type NodeStatus = lockhook.NodeStatus

// Nodes returns the number of c's nodes.
func Nodes(c *redlock.Client) int { return lockhook.Nodes(c) }

// Quorum returns the number of c's nodes that must agree (N/2+1).
func Quorum(c *redlock.Client) int { return Nodes(c)/2 + 1 }

// PingNodes pings every node at once and reports each one's answer, waiting
// for all of them (at most the node timeout), so that a probe can tell which
// nodes are down and whether a quorum is left.
func PingNodes(ctx context.Context, c *redlock.Client) ([]NodeStatus, error) {
	return lockhook.PingNodes(c, ctx)
}

// WithLocalQueue turns the client's in-process FIFO queue of Acquire
// waiters on or off (default on), for tests that contend on the nodes alone.
func WithLocalQueue(on bool) redlock.Option { return lockhook.LocalQueue(on).(redlock.Option) }

// WithBatchWindow sets how long a node's worker may hold a call back to send
// it with others (default 100µs; 0 turns it off), for benchmarks comparing
// windows; see docs/BATCHING.md.
func WithBatchWindow(d time.Duration) redlock.Option {
	return lockhook.BatchWindow(d).(redlock.Option)
}

// InspectOnly makes NewFromURLs keep the nodes it would refuse (one server
// reached twice, a misconfigured node), for the operator's check, which
// reports them.
func InspectOnly() redlock.Option { return lockhook.InspectOnly().(redlock.Option) }

// SurvivesRestart reports whether the node keeps every acknowledged write
// across a crash (AOF with appendfsync always), so it may rejoin at once.
// Otherwise it must stay down for the largest TTL after a crash.
func SurvivesRestart(r redlock.NodeReport) bool {
	return r.AppendOnly && r.AppendFsync == "always"
}
