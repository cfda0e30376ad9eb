package redlock

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// NodeState is one node's view of a resource.
type NodeState struct {
	Node  int    // index in the node list
	Addr  string // the node's address (no credentials)
	Token string // the holder's token, "" when the node has no lock key
	// Holder is who holds the lock, read from Token (ContextWithHolder
	// names it); zero when Token carries none.
	Holder Holder
	TTL    time.Duration // the lock key's remaining time to live, 0 when free
	Fence  int64         // the node's fencing counter, 0 when it has none
	Err    error         // the node's failure, if it did not answer
	// Reserved: the key is free but kept, for TTL, for the first waiter of
	// the nodes' FIFO queue (docs/design/HANDOVER.md); Token is then "".
	Reserved bool
	// Slot and Limit describe a resource used WithLimit(n), n > 1: this
	// state is the node's view of slot Slot of Limit, the largest limit in
	// use on any node. Both are 0 otherwise.
	Slot, Limit int
	// Limits are the limits in use on this node, in increasing order, from
	// its mark: one, or several while a change of limit is under way
	// (docs/design/REDLOCK.md, "Changing n"); nil when the node has no mark.
	Limits []int
}

// Inspect asks every node who holds resource and for how long, waiting for
// each answer up to its I/O timeout (4 node timeouts, at least 200ms): a
// read is not latency-bound, and a loaded node must not make a held lock
// look free. A node that fails or times out has Err set; the error is
// reserved for bad input and the end of ctx. A resource is held by the
// token that a quorum of the nodes carry. It returns one state per node,
// or, for a resource held WithLimit(n) (its mark is on some node), one per
// slot and node, slot by slot (Slot, Limit): n × the nodes.
func (c *Client) Inspect(ctx context.Context, resource string) ([]NodeState, error) {
	return c.inspect(ctx, resource, ioTimeout(c.cfg.nodeTimeout))
}

// inspect is Inspect with every node's answer awaited for at most timeout.
func (c *Client) inspect(ctx context.Context, resource string, timeout time.Duration) ([]NodeState, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if resource == "" {
		return nil, invalidf("empty resource name")
	}
	k := c.keysFor(resource)
	deadline := time.Now().Add(timeout)
	args := inspectScript.args(k.bothKeys())
	r := c.broadcast("inspect", resource, c.allNodes(), len(c.nodes), deadline, false, args, inspectScript)
	if err := r.collectAll(ctx, deadline, classifyAnswered); err != nil {
		return nil, err
	}
	out := make([]NodeState, len(c.nodes))
	limit := 0
	marks := make([][]int, len(c.nodes))
	for i, n := range c.nodes {
		sl := r.slots[i]
		st := NodeState{Node: i, Addr: n.addr, Err: sl.err}
		if sl.out == outOK {
			st = parseInspect(st, sl.val)
		}
		if ls := limitsOfMark(st.Token); len(ls) > 0 {
			marks[i] = ls
			limit = max(limit, min(ls[len(ls)-1], MaxLimit))
		}
		out[i] = st
	}
	if limit > 1 {
		return c.inspectSlots(ctx, resource, limit, marks, timeout)
	}
	return out, nil
}

// inspectSlots is Inspect of a resource whose lock key holds the mark of a
// limit of n slots (the largest of marks, each node's limits in use): each
// node's view of each slot, slot by slot.
func (c *Client) inspectSlots(ctx context.Context, resource string, n int, marks [][]int, timeout time.Duration) ([]NodeState, error) {
	names := make([]string, n+1)
	for i := range n {
		names[i] = c.slotKeys(resource, i).key
	}
	names[n] = c.keysFor(resource).fenceKey
	deadline := time.Now().Add(timeout)
	r := c.broadcast("inspect", resource, c.allNodes(), len(c.nodes), deadline, false, inspectSlotsScript.args(names), inspectSlotsScript)
	if err := r.collectAll(ctx, deadline, classifyAnswered); err != nil {
		return nil, err
	}
	out := make([]NodeState, 0, n*len(c.nodes))
	for s := range n {
		for i, nd := range c.nodes {
			sl := r.slots[i]
			st := NodeState{Node: i, Addr: nd.addr, Err: sl.err, Slot: s, Limit: n, Limits: marks[i]}
			if vals, ok := sl.val.([]any); ok && sl.out == outOK && len(vals) == 2*n+1 {
				st = parseInspect(st, []any{vals[2*s], vals[2*s+1], vals[2*n]})
			}
			out = append(out, st)
		}
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
		st.Holder, _ = parseHolder(tok)
		if strings.HasPrefix(tok, reservePrefix) {
			st.Token, st.Holder, st.Reserved = "", Holder{}, true
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
