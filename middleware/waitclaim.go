package middleware

import "time"

// claimFor is how long a resource that a full cap refused counts in the
// shares while it has no waiter. Shares divide the cap among the resources
// with waiters; without the claim, a resource that filled the cap alone
// kept its whole share, each of its leaving waiters replaced by its next
// promoted task, and a newly hot resource found no room until it drained
// (docs/guide/HOTKEYS.md). A refused task comes back on the next promotion,
// well within it.
const claimFor = time.Second

// claim is a refused resource's place in the shares.
type claim struct {
	limit int // its slots (WithLimit)
	until time.Time
}

// claimLocked notes that res, of limit slots, was refused for want of
// room; c.mu is held.
func (c *waitCap) claimLocked(res string, limit int, now time.Time) {
	if c.per[res] > 0 {
		return
	}
	if c.claims == nil {
		c.claims = make(map[string]claim)
	}
	c.claims[res] = claim{limit: limit, until: now.Add(claimFor)}
}

// claimWeightLocked is the slots of the resources other than res that were
// refused within claimFor and have no waiter; it drops the claims that are
// over. c.mu is held.
func (c *waitCap) claimWeightLocked(res string, now time.Time) int {
	w := 0
	for r, cl := range c.claims {
		switch {
		case now.After(cl.until) || c.per[r] > 0:
			delete(c.claims, r)
		case r != res:
			w += cl.limit
		}
	}
	return w
}
