package redlock

import "context"

// Admin holds the calls an operator's tools need and a lock's users never
// do: the nodes and their reachability, the locks the nodes hold, and a
// forced release (Redisson's forceUnlock). The `asynqlock` command and the
// worker's /locks page and readiness probe use it.
type Admin struct{ c *Client }

// Admin returns the operator calls on c's nodes.
func (c *Client) Admin() Admin { return Admin{c: c} }

// Nodes returns the number of lock nodes.
func (a Admin) Nodes() int { return len(a.c.nodes) }

// Quorum returns the number of nodes that must agree: N/2+1.
func (a Admin) Quorum() int { return a.c.q }

// NodeStatus is one node's answer to Admin.Ping.
type NodeStatus struct {
	Node int    // index of the node in the client's list
	Addr string // the node's address, never its credentials
	Err  error  // nil when the node answered; else a *NodeError
}

// Ping pings every node at once and reports each one's answer, waiting for
// all of them (at most the node timeout), so that a probe can tell which
// nodes are down and whether a quorum is left.
func (a Admin) Ping(ctx context.Context) ([]NodeStatus, error) { return a.c.pingNodes(ctx) }

// Scan returns the resources whose lock key, on any node, starts with
// resourcePrefix under the client's key prefix (unsorted, possibly
// repeated), and each node's scan failure (nil where it was scanned). It
// walks every node's keyspace with SCAN, never KEYS.
func (a Admin) Scan(ctx context.Context, resourcePrefix string) ([]string, []error, error) {
	return a.c.scan(ctx, resourcePrefix)
}

// ForceRelease deletes resource's lock key (or slot) on every node where it
// still holds token and announces the release to waiters; it reports on how
// many nodes it did. A key that meanwhile changed hands is left alone. The
// holder keeps running until its next extension finds the lock gone.
func (a Admin) ForceRelease(ctx context.Context, resource, token string) (int, error) {
	return a.c.forceRelease(ctx, resource, token)
}
