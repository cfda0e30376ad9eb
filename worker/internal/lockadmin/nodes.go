package lockadmin

import (
	"context"

	"github.com/asynqlock/asynqlock/redlock"
)

// Quorum is how many of n lock nodes must agree: Redlock's N/2+1.
func Quorum(n int) int { return n/2 + 1 }

// PingNodes pings every node at once and reports each one's answer (Node,
// Addr and Err), waiting for all of them (at most the node timeout), so that
// a probe can tell which nodes are down and whether a quorum is left.
func PingNodes(ctx context.Context, c *redlock.Client) ([]redlock.NodeReport, error) {
	return c.Admin().Ping(ctx)
}

// SurvivesRestart reports whether the node keeps every acknowledged write
// across a crash (AOF with appendfsync always), so it may rejoin at once.
// Otherwise it must stay down for the largest TTL after a crash.
func SurvivesRestart(r redlock.NodeReport) bool {
	return r.AppendOnly && r.AppendFsync == "always"
}
