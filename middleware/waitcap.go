package middleware

import (
	"fmt"
	"sync"

	"github.com/asynqlock/asynqlock/redlock"
)

// errWaitCap is the conflict of a parked task that found no room to wait:
// the process's waiters are at their cap across resources.
var errWaitCap = fmt.Errorf("middleware: %w: the waiters across resources are at their cap", redlock.ErrLocked)

// WaitCap bounds the tasks of a process that wait for their locks at once,
// across all resources, so that however many resources are hot at once,
// other tasks keep workers. Within the cap, each resource with waiters gets
// an equal share (at least one): n hot resources take turns with about
// cap/n waiters each, and a newly hot resource finds room as soon as a
// waiter of a resource above its share leaves. Share one WaitCap among the
// middlewares of a process (one per task type) with WithWaitCap; it is safe
// for concurrent use. Tasks on their last retry may wait past it (asynq
// would archive them otherwise).
type WaitCap struct {
	max int

	mu    sync.Mutex
	total int
	per   map[string]int // waiters per resource; only resources with waiters
}

// NewWaitCap returns a cap of n waiting tasks (n >= 1).
func NewWaitCap(n int) *WaitCap {
	return &WaitCap{max: max(n, 1), per: make(map[string]int)}
}

// Waiting returns how many tasks wait under the cap now.
func (c *WaitCap) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// enter takes a slot for a waiter of res if the cap and res's share allow;
// a resource of limit slots (WithLimit) has limit shares. A nil cap always
// allows.
func (c *WaitCap) enter(res string, limit int) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.per[res]
	resources := len(c.per)
	if n == 0 {
		resources++
	}
	if c.total >= c.max || n >= min(c.max, limit*max(1, c.max/resources)) {
		return false
	}
	c.total++
	c.per[res] = n + 1
	return true
}

// force takes a slot for a waiter of res whatever the cap.
func (c *WaitCap) force(res string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.total++
	c.per[res]++
	c.mu.Unlock()
}

// leave gives a waiter's slot back.
func (c *WaitCap) leave(res string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.per[res]--; c.per[res] <= 0 {
		delete(c.per, res)
	}
	c.total--
}
