package redlock

import (
	"math"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// maxLimit is the largest n WithLimit accepts (lockutil.MaxLimit).
const maxLimit = lockutil.MaxLimit

// fenceClasses is the modulus of a slot's fence class: slot s takes fences
// equal to s modulo fenceClasses, whatever n, so that holders of different
// slots never share a fence, also while callers of two limits share the
// slots (docs/design/REDLOCK.md, "Limits").
const fenceClasses = maxLimit

// WithLimit lets up to n holders have the resource at once, each in one of
// n slots (Lock.Slot), and each slot a quorum lock of its own, with the
// safety and fault tolerance of a single lock. TryAcquire fails with
// ErrLocked when all n are held; Acquire waits for whichever slot frees
// first, in FIFO order (docs/design/HANDOVER.md). Fences (WithFencing) are
// never shared by two holders of the resource. Callers may give one resource
// different n, as while a change of n rolls out: at most the largest n in
// use hold it at once (docs/design/REDLOCK.md, "Limits" and "Changing n").
// n must be in [1, 1024]; WithLimit(1) is the default, one holder.
func WithLimit(n int) LockOption {
	return func(c *lockConfig) { c.limit = int32(max(min(n, maxLimit+1), math.MinInt32)) }
}

// Slot returns which of the resource's n slots the lock holds, in [0, n),
// when it was acquired WithLimit(n); 0 otherwise, and for a nil Lock.
func (l *Lock) Slot() int {
	if l == nil {
		return 0
	}
	return int(l.slot)
}
