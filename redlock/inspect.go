package redlock

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockhook"
)

// NodeState is one node's view of a resource.
type NodeState struct {
	Node  int           // index in the node list
	Addr  string        // the node's address (no credentials)
	Token string        // the holder's token, "" when the node has no lock key
	TTL   time.Duration // the lock key's remaining time to live, 0 when free
	Fence int64         // the node's fencing counter, 0 when it has none
	Err   error         // the node's failure, if it did not answer
	// Reserved: the key is free but kept, for TTL, for the first waiter of
	// the nodes' FIFO queue (docs/HANDOVER.md); Token is then "".
	Reserved bool
}

// Held reports whether this node holds a lock key for the resource.
func (s NodeState) Held() bool { return s.Token != "" }

// Inspect asks every node who holds resource and for how long, waiting at
// most the node timeout for each. A node that fails or times out has Err set;
// the error is reserved for bad input and the end of ctx. A resource is held
// by the token that a quorum (len(states)/2+1) of the nodes carry.
func (c *Client) Inspect(ctx context.Context, resource string) ([]NodeState, error) {
	wait := c.cfg.nodeTimeout
	if ctx != nil {
		wait = max(wait, lockhook.InspectWait(ctx))
	}
	return c.inspect(ctx, resource, wait)
}

// inspect is Inspect with every node's answer awaited for at most timeout.
func (c *Client) inspect(ctx context.Context, resource string, timeout time.Duration) ([]NodeState, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	if resource == "" {
		return nil, invalidf("empty resource name")
	}
	k := c.keysFor(resource)
	deadline := time.Now().Add(timeout)
	args := inspectScript.args(k.bothKeys())
	mask := c.allNodes()
	r := c.broadcast("inspect", resource, mask, len(c.nodes), deadline, false, args, inspectScript)
	if err := r.collectAll(ctx, deadline, classifyAnswered); err != nil {
		return nil, err
	}
	out := make([]NodeState, len(c.nodes))
	for i, n := range c.nodes {
		sl := r.slots[i]
		st := NodeState{Node: i, Addr: n.addr, Err: sl.err}
		if sl.out == outOK {
			st = parseInspect(st, sl.val)
		}
		out[i] = st
	}
	return out, nil
}

func parseInspect(st NodeState, v any) NodeState {
	vals, ok := v.([]any)
	if !ok || len(vals) < 2 {
		return st
	}
	if tok, ok := vals[0].(string); ok {
		st.Token = tok
		if strings.HasPrefix(tok, reservePrefix) {
			st.Token, st.Reserved = "", true
		}
	}
	if ms, ok := vals[1].(int64); ok && ms > 0 {
		st.TTL = time.Duration(ms) * time.Millisecond
	}
	if len(vals) > 2 {
		if f, ok := vals[2].(string); ok {
			st.Fence, _ = strconv.ParseInt(f, 10, 64)
		}
	}
	return st
}
