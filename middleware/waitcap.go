package middleware

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// errWaitCap is the conflict of a parked task that found no room to wait:
// the process's waiters are at their cap across resources.
var errWaitCap = fmt.Errorf("middleware: %w: the waiters across resources are at their cap", redlock.ErrLocked)

// waitCap is a Room's wait places: it bounds the tasks of a process that
// wait for their locks at once, across all resources. Within the cap, each
// resource with waiters gets an equal share per slot (WithLimit; at least
// one): n hot resources of one slot take turns with about cap/n waiters
// each, and a newly hot resource finds room as soon as a waiter of a
// resource above its share leaves.
type waitCap struct {
	max int

	mu     sync.Mutex
	total  int
	per    map[string]int   // waiters per resource; only resources with waiters
	slots  map[string]int   // the slots (WithLimit) of each resource in per
	weight int              // the sum of slots
	claims map[string]claim // resources refused lately, with no waiter (waitclaim.go)
}

// newWaitCap returns a cap of n waiting tasks (n >= 1).
func newWaitCap(n int) *waitCap {
	return &waitCap{max: max(n, 1), per: make(map[string]int), slots: make(map[string]int)}
}

// waiting returns how many tasks wait under the cap now.
func (c *waitCap) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// enter takes a slot for a waiter of res if the cap and res's share allow:
// shares are weighed by the resources' slots (WithLimit), so a resource of
// limit slots gets limit times the share of a resource of one. A nil cap
// always allows.
func (c *waitCap) enter(res string, limit int) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.total >= c.max || c.per[res] >= c.shareLocked(res, limit, now) {
		c.claimLocked(res, limit, now)
		return false
	}
	c.add(res, limit)
	return true
}

// share is how many tasks of res may wait under the cap now: its share
// among the resources with waiters or refused lately, res counted (at
// least one). A nil cap
// sets none (math.MaxInt).
func (c *waitCap) share(res string, limit int) int {
	if c == nil {
		return math.MaxInt
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shareLocked(res, limit, time.Now())
}

// shareLocked is share with c.mu held; the resources refused lately for
// want of room count as if they had waiters (claimLocked).
func (c *waitCap) shareLocked(res string, limit int, now time.Time) int {
	weight := c.weight + c.claimWeightLocked(res, now)
	if c.per[res] == 0 {
		weight += limit
	}
	return max(1, c.max*limit/weight)
}

// force takes a slot for a waiter of res whatever the cap.
func (c *waitCap) force(res string, limit int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.add(res, limit)
	c.mu.Unlock()
}

// add counts a waiter of res, a resource of limit slots; c.mu is held.
func (c *waitCap) add(res string, limit int) {
	delete(c.claims, res)
	if c.per[res] == 0 {
		c.slots[res] = limit
		c.weight += limit
	}
	c.total++
	c.per[res]++
}

// leave gives a waiter's slot back.
func (c *waitCap) leave(res string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.per[res]--; c.per[res] <= 0 {
		delete(c.per, res)
		c.weight -= c.slots[res]
		delete(c.slots, res)
	}
	c.total--
}
