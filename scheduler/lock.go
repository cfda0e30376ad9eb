package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// locker is the part of *redlock.Client the scheduler uses; tests replace it
// with an in-memory lock service on a fake clock.
type locker interface {
	TryAcquire(ctx context.Context, resource string, ttl time.Duration) (lease, error) // one attempt
	Acquire(ctx context.Context, resource string, ttl time.Duration) (lease, error)    // waits until ctx ends
	// Record returns the remaining TTL of resource's lock on the nodes of a
	// quorum's holder (the longest) and its token; false if no quorum holds it.
	Record(ctx context.Context, resource string) (remaining time.Duration, token string, ok bool)
	Check(ctx context.Context) ([]clockReport, error) // this process's clock offset to each node
	// Mark takes resource for ttl with a note and leaves it to expire; when
	// another holder has it, it fails with redlock.ErrLocked and that note.
	Mark(ctx context.Context, resource string, ttl time.Duration, note string) (string, error)
}

// lease is a held lock: *redlock.Lock.
type lease interface {
	KeepAlive(ctx context.Context) (context.Context, context.CancelFunc) // cancelled with cause redlock.ErrLockLost on loss
	Release(ctx context.Context) error
	LeaveToExpire() error // keys stay until their TTL; their end is no loss
}

// redlockLocker adapts a *redlock.Client.
type redlockLocker struct{ c *redlock.Client }

func (r redlockLocker) TryAcquire(ctx context.Context, resource string, ttl time.Duration) (lease, error) {
	return asLease(r.c.TryAcquire(ctx, resource, ttl))
}

func (r redlockLocker) Acquire(ctx context.Context, resource string, ttl time.Duration) (lease, error) {
	return asLease(r.c.Acquire(ctx, resource, ttl))
}

// asLease returns l as a lease, nil (not a typed nil) on error.
func asLease(l *redlock.Lock, err error) (lease, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (r redlockLocker) Record(ctx context.Context, resource string) (time.Duration, string, bool) {
	states, err := r.c.Inspect(ctx, resource)
	if err != nil {
		return 0, "", false
	}
	votes := map[string]int{}
	longest := map[string]time.Duration{}
	for _, s := range states {
		if s.Err == nil && s.Held() {
			votes[s.Token]++
			longest[s.Token] = max(longest[s.Token], s.TTL)
		}
	}
	for tok, n := range votes {
		if n >= len(states)/2+1 { // a quorum of the nodes
			return longest[tok], tok, true
		}
	}
	return 0, "", false
}

func lockerFor(c *redlock.Client) (locker, error) {
	if c == nil {
		return nil, invalidf("nil redlock client")
	}
	return redlockLocker{c}, nil
}

// Check measures this process's clock offset to each lock node with
// redlock's Check (the node's TIME at the midpoint of the round trip).
func (r redlockLocker) Check(ctx context.Context) ([]clockReport, error) {
	reps, err := r.c.Admin().Check(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]clockReport, len(reps))
	for i, n := range reps {
		out[i] = clockReport{Node: n.Addr, Offset: n.ClockOffset, RTT: n.RTT, Err: n.Err} // Err: TIME failed
	}
	return out, nil
}

// Mark notes the holder in the lock's token (redlock.ContextWithHolder), so
// that a contender reads it from the record; a client with
// WithHolderInfo(false) records no note.
func (r redlockLocker) Mark(ctx context.Context, resource string, ttl time.Duration, note string) (string, error) {
	l, err := r.c.TryAcquire(redlock.ContextWithHolder(ctx, note), resource, ttl)
	if err == nil {
		_ = l.LeaveToExpire()
		return "", nil
	}
	if !errors.Is(err, redlock.ErrLocked) {
		return "", err
	}
	_, token, _ := r.Record(ctx, resource)
	h, _ := redlock.ParseHolder(token)
	return h.Name, err
}
