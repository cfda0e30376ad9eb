package redlock

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// NodeState is one node's view of a resource.
type NodeState struct {
	Node   int           // index in the node list
	Addr   string        // the node's address (no credentials)
	Token  string        // the holder's token, "" when the node has no lock key
	Holder Holder        // who holds the lock (ContextWithHolder), read from Token
	TTL    time.Duration // the lock key's remaining time to live, 0 when free
	Fence  int64         // the node's fencing counter, 0 when it has none
	Err    error         // the node's failure, if it did not answer
	// Reserved: the key is free but kept, for TTL, for the first waiter of
	// the nodes' FIFO queue (docs/design/HANDOVER.md); Token is then "".
	Reserved bool
	// Slot and Limit are set for a resource (WithLimit) whose slots above 0
	// are held or reserved on some node: this is the node's view of slot
	// Slot, and Limit is one more than the highest such slot on any node.
	Slot, Limit int
}

// Inspect asks every node who holds resource and for how long, waiting up
// to 4 node timeouts (at least 200ms): a loaded node must not make a held
// lock look free. A node that fails has Err set; the error is for bad input
// and the end of ctx. A resource is held by the token a quorum of the nodes
// carry. It returns a state per node, or, for a resource whose slots above
// 0 are in use, per slot and node, slot by slot (Slot, Limit).
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
	names := k.bothKeys()
	for i := 1; i < maxLimit; i++ {
		names = append(names, slotKey(k.key, i))
	}
	deadline := time.Now().Add(timeout)
	r := c.broadcast("inspect", resource, c.allNodes(), len(c.nodes), deadline, false, scriptArgs(inspectScript, names), inspectScript)
	if err := r.collectAll(ctx, deadline, classifyAnswered); err != nil {
		return nil, err
	}
	limit := 0
	for i := range c.nodes {
		if vals, ok := r.slots[i].val.([]any); ok && r.slots[i].out == outOK && len(vals) > 3 {
			n, _ := vals[len(vals)-3].(int64)
			limit = max(limit, int(n)+1)
		}
	}
	out := make([]NodeState, 0, max(limit, 1)*len(c.nodes))
	for s := range max(limit, 1) {
		for i, n := range c.nodes {
			sl := r.slots[i]
			st := NodeState{Node: i, Addr: n.Addr, Err: sl.err, Slot: s, Limit: limit}
			if vals, ok := sl.val.([]any); ok && sl.out == outOK && len(vals) >= 3 {
				st = parseInspect(st, vals, s)
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// parseInspect fills st with slot s's token, TTL and fence from a node's
// inspect answer: the lock key's for slot 0, else the slot's entry (none:
// free).
func parseInspect(st NodeState, vals []any, s int) NodeState {
	tok, ttl := vals[0], vals[1]
	if s > 0 {
		tok, ttl = nil, nil
		for j := 3; j+2 < len(vals); j += 3 {
			if n, _ := vals[j].(int64); int(n) == s {
				tok, ttl = vals[j+1], vals[j+2]
			}
		}
	}
	if tok, ok := tok.(string); ok && strings.HasPrefix(tok, reservePrefix) {
		st.Reserved = true
	} else if ok {
		st.Token = tok
		st.Holder, _ = parseHolder(tok)
	}
	if ms, ok := ttl.(int64); ok && ms > 0 {
		st.TTL = time.Duration(ms) * time.Millisecond
	}
	if f, ok := vals[2].(string); ok {
		st.Fence, _ = strconv.ParseInt(f, 10, 64)
	}
	return st
}
