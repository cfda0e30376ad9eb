package redlock

import "math"

// A resource locked WithLimit(n), n > 1, has n slots, each a Redlock lock
// of its own: slot 0 is the resource's own lock key, slot i > 0 a key beside
// it under the same hash tag, so a slot is as safe and as fault tolerant as
// a plain lock, and a caller of n takes only slots below n
// (docs/design/REDLOCK.md, "Limits").

// MaxLimit is the largest n WithLimit accepts: a TryAcquire of a full
// resource makes one round per slot.
const MaxLimit = 1024

// fenceClasses is the modulus of a slot's fence class: slot s takes fences
// equal to s modulo fenceClasses, whatever n, so that holders of different
// slots never share a fence, also while callers of two limits share the
// slots (docs/design/REDLOCK.md, "Limits").
const fenceClasses = MaxLimit

// WithLimit lets up to n holders have the resource at once: each holds one
// of n slots (Lock.Slot), and each slot is a quorum lock of its own, with the
// safety and fault tolerance of a single lock. TryAcquire fails with
// ErrLocked when all n are held; Acquire waits for whichever slot frees
// first, woken by the release of any. Fences (WithFencing) come from one
// counter per resource: no two holders of the resource share one, and each
// is larger than every fence handed out before its acquisition began,
// whatever their slots (holders of slot s take fences equal to s modulo
// MaxLimit; docs/design/REDLOCK.md, "Limits"). Callers may give one resource
// different n, as while a change of n rolls out: slot 0 is the plain lock's
// key and slot i one lock whatever n, and a caller of n takes only slots
// below n, so at most the largest n in use hold it at once, and nobody is
// refused for the difference (docs/design/REDLOCK.md, "Changing n"). n must
// be in [1, MaxLimit]; WithLimit(1) is the default, one holder. Waiters of a
// resource of n > 1 slots queue in FIFO order in their process, and a slot
// released by their Client is handed to the first of them in one round;
// waiters of different processes queue on the nodes in one queue per
// resource shared by its slots, and a slot released while they wait is
// reserved for the earliest (docs/design/HANDOVER.md).
func WithLimit(n int) LockOption {
	return func(c *lockConfig) { c.limit, c.limited = int32(max(min(n, MaxLimit+1), math.MinInt32)), true }
}

// Slot returns which of the resource's n slots the lock holds, in [0, n),
// when it was acquired WithLimit(n); 0 otherwise, and for a nil Lock.
func (l *Lock) Slot() int {
	if l == nil {
		return 0
	}
	return int(l.slot)
}
