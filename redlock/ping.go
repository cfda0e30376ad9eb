package redlock

import (
	"context"
	"fmt"
	"time"
)

// NodeStatus is one node's answer to PingNodes.
type NodeStatus struct {
	Node int    // index of the node in the list given to New
	Addr string // the node's address, never its credentials
	Err  error  // nil when the node answered; else the cause (a *NodeError)
}

// Ping checks that a quorum of nodes answers, within the node timeout. It
// returns nil when at least N/2+1 nodes replied, else an error matching
// ErrQuorum that counts the nodes that answered and carries each failing
// node's cause: use it for readiness probes.
func (c *Client) Ping(ctx context.Context) error {
	r, err := c.pingAll(ctx)
	if err != nil {
		return err
	}
	if !r.t.success() {
		return r.err([]error{ErrQuorum}, fmt.Sprintf("%d of %d nodes answered (quorum %d)", r.t.ok, r.t.total, c.q))
	}
	return nil
}

// PingNodes pings every node at once and reports each one's answer, waiting
// for all of them (at most the node timeout), so that a probe can tell which
// nodes are down and whether a quorum is left.
func (c *Client) PingNodes(ctx context.Context) ([]NodeStatus, error) {
	r, err := c.pingAll(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]NodeStatus, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = NodeStatus{Node: i, Addr: n.addr}
		if sl := r.slots[i]; sl.out != outOK {
			cause := sl.err
			if cause == nil {
				cause = errNodeTimeout
			}
			out[i].Err = &NodeError{Node: i, Addr: n.addr, Op: "ping", Err: cause}
		}
	}
	return out, nil
}

// pingAll sends PING to every node and waits for every answer or the node
// timeout: a probe must count the nodes that are up, not stop at the first
// decided outcome.
func (c *Client) pingAll(ctx context.Context) (*round, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	r := c.broadcast("ping", "", c.allNodes(), c.q, deadline, false, []any{"ping"}, nil)
	if err := r.collectAll(ctx, deadline, classifyAnswered); err != nil {
		return nil, err
	}
	return r, nil
}
