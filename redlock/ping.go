package redlock

import (
	"context"
	"fmt"
	"time"
)

// Ping checks that a quorum of nodes answers, within the node timeout. It
// returns nil when at least N/2+1 nodes replied, else an error matching
// ErrQuorum with each failing node's cause: use it for readiness probes.
func (c *Client) Ping(ctx context.Context) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if c.isClosed() {
		return ErrClosed
	}
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	r := c.broadcast("ping", "", c.allNodes(), c.q, deadline, false, []any{"ping"}, nil)
	if err := r.collect(ctx, deadline, classifyAnswered); err != nil {
		return err
	}
	if !r.t.success() {
		return r.err([]error{ErrQuorum}, fmt.Sprintf("%d of %d nodes answered (quorum %d)", r.t.ok, r.t.total, c.q))
	}
	return nil
}
