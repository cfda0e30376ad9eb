package lockadmin

import (
	"context"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// ForceRelease deletes resource's lock key on every node where it still holds
// token (a NodeState.Token seen with Inspect or List) and announces the
// release to waiters; it reports on how many nodes a key was deleted. A key
// that meanwhile changed hands is left alone. It is the operator's
// break-glass: the holder keeps running until its next extension finds the
// lock gone (then its context is cancelled with ErrLockLost), so use it for a
// holder that is stuck or gone, not one that works. A node that fails is in
// the error, matched by errors.As with *redlock.NodeError, next to the count
// of the nodes that did delete.
func ForceRelease(ctx context.Context, c *redlock.Client, resource, token string) (int, error) {
	return c.Admin().ForceRelease(ctx, resource, token)
}

// Claim is one token's hold on a resource: the nodes whose lock key carries
// it. A resource normally has one claim; several while contenders split the
// nodes, or when leftovers of an earlier holder remain on a minority.
type Claim struct {
	Token  string
	Holder redlock.Holder // from the token; zero when it carries none
	Nodes  []int          // node indexes, ascending
	TTL    time.Duration  // the shortest remaining TTL among those nodes
	Fence  int64          // the highest fencing counter among those nodes
	// Slot and Limit: the slot the token holds, and one more than the
	// highest slot held on any node (redlock.NodeState), for a resource
	// with slots above slot 0 held (redlock.WithLimit); both 0 otherwise.
	Slot, Limit int
}

// NodeCount is the number of nodes a resource's states (Inspect, List)
// describe: one state per node, or per node and slot for a resource of
// several slots.
func NodeCount(states []redlock.NodeState) int {
	n := 0
	for _, s := range states {
		if s.Slot == 0 {
			n++
		}
	}
	return n
}

// SlotText names a claim's slot ("slot 1"), "" for a resource without
// slots above slot 0 held.
func (c Claim) SlotText() string {
	if c.Limit < 2 {
		return ""
	}
	return fmt.Sprintf("slot %d", c.Slot)
}

// Claims groups a resource's node states (Inspect, List) by token, in node
// order. A claim with at least Quorum(c) nodes is the lock's holder.
func Claims(states []redlock.NodeState) []Claim {
	var out []Claim
	at := map[string]int{}
	for _, s := range states {
		if s.Token == "" {
			continue
		}
		i, ok := at[s.Token]
		if !ok {
			i = len(out)
			at[s.Token] = i
			out = append(out, Claim{Token: s.Token, Holder: s.Holder, TTL: s.TTL, Slot: s.Slot, Limit: s.Limit})
		}
		c := &out[i]
		c.Nodes = append(c.Nodes, s.Node)
		c.TTL = min(c.TTL, s.TTL)
		c.Fence = max(c.Fence, s.Fence)
	}
	return out
}
