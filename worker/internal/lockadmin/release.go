package lockadmin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	// Slot and Limit: the slot the token holds, of a resource used
	// redlock.WithLimit(Limit); both 0 otherwise. Limit is the largest
	// limit in use, the one in force.
	Slot, Limit int
	// Limits are the limits in use on the claim's nodes (NodeState.Limits),
	// several while a change of limit is under way.
	Limits []int
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

// SlotText names a claim's slot ("slot 1/3"; "slot 4/5, changing: limits
// 3 and 5" while callers of several limits share the slots), "" for a
// resource without a limit.
func (c Claim) SlotText() string {
	if c.Limit < 2 {
		return ""
	}
	if len(c.Limits) > 1 {
		return fmt.Sprintf("slot %d/%d, changing: %s", c.Slot, c.Limit, LimitsText(c.Limits))
	}
	return fmt.Sprintf("slot %d/%d", c.Slot, c.Limit)
}

// LimitText says which limit is in force on a resource from its node
// states (Inspect, List): "" without a limit, "limit 3", or "limit 5 in
// force, changing: limits 3 and 5 in use" while callers of several limits
// share its slots (docs/design/REDLOCK.md, "Changing n").
func LimitText(states []redlock.NodeState) string {
	var in []int
	force := 0
	for _, s := range states {
		force = max(force, s.Limit)
		in = append(in, s.Limits...)
	}
	slices.Sort(in)
	in = slices.Compact(in)
	switch {
	case force < 2:
		return ""
	case len(in) > 1:
		return fmt.Sprintf("limit %d in force, changing: %s in use", force, LimitsText(in))
	}
	return fmt.Sprintf("limit %d", force)
}

// LimitsText names several limits: "limits 3 and 5".
func LimitsText(limits []int) string {
	nums := make([]string, len(limits))
	for i, n := range limits {
		nums[i] = strconv.Itoa(n)
	}
	if len(nums) < 2 {
		return "limit " + strings.Join(nums, "")
	}
	return "limits " + strings.Join(nums[:len(nums)-1], ", ") + " and " + nums[len(nums)-1]
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
		c.Limits = appendLimits(c.Limits, s.Limits)
		c.Nodes = append(c.Nodes, s.Node)
		c.TTL = min(c.TTL, s.TTL)
		c.Fence = max(c.Fence, s.Fence)
	}
	return out
}

// appendLimits adds limits to a claim's sorted set of limits in use.
func appendLimits(set, limits []int) []int {
	for _, n := range limits {
		if i, found := slices.BinarySearch(set, n); !found {
			set = slices.Insert(set, i, n)
		}
	}
	return set
}
