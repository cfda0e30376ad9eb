package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
)

// locker is the part of *redlock.Client the scheduler uses; tests replace it
// with an in-memory lock service on a fake clock.
type locker interface {
	TryAcquire(ctx context.Context, resource string, ttl time.Duration) (lease, error) // one attempt
	Acquire(ctx context.Context, resource string, ttl time.Duration) (lease, error)    // waits until ctx ends
	// Record returns the remaining TTL of resource's lock on the nodes of a
	// quorum's holder (the longest) and that holder; false if no quorum holds it.
	Record(ctx context.Context, resource string) (remaining time.Duration, holder redlock.Holder, ok bool)
	// Check is redlock's Admin().Check: this process's clock offset to each node.
	Check(ctx context.Context) ([]redlock.NodeReport, error)
	// Mark takes resource for ttl with a note and leaves it to expire; when
	// another holder has it, it fails with redlock.ErrLocked and that note.
	Mark(ctx context.Context, resource string, ttl time.Duration, note string) (string, error)
}

// lease is a held lock (*redlock.Lock).
type lease interface {
	KeepAlive(ctx context.Context) (context.Context, context.CancelFunc) // cancelled with cause redlock.ErrLockLost on loss
	Release(ctx context.Context) error
	LeaveToExpire() error // keys stay until their TTL; their end is no loss
}

type redlockLocker struct{ c *redlock.Client }

func lockerFor(c *redlock.Client) (locker, error) {
	if c == nil {
		return nil, invalidf("nil redlock client")
	}
	return redlockLocker{c}, nil
}

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
	return redlockLease{l}, nil
}

// redlockLease is a *redlock.Lock with the scheduler's LeaveToExpire.
type redlockLease struct{ *redlock.Lock }

func (l redlockLease) LeaveToExpire() error { return lockutil.LeaveToExpire(l.Lock) }

func (r redlockLocker) Record(ctx context.Context, resource string) (time.Duration, redlock.Holder, bool) {
	states, err := r.c.Inspect(ctx, resource)
	if err != nil {
		return 0, redlock.Holder{}, false
	}
	votes, longest := map[string]int{}, map[string]time.Duration{}
	holders := map[string]redlock.Holder{}
	for _, s := range states {
		if s.Err == nil && s.Token != "" {
			votes[s.Token]++
			longest[s.Token] = max(longest[s.Token], s.TTL)
			holders[s.Token] = s.Holder
		}
	}
	for tok, n := range votes {
		if n >= len(states)/2+1 {
			return longest[tok], holders[tok], true
		}
	}
	return 0, redlock.Holder{}, false
}

func (r redlockLocker) Check(ctx context.Context) ([]redlock.NodeReport, error) {
	return r.c.Admin().Check(ctx)
}

// Mark notes the holder in the lock's token (redlock.ContextWithHolder);
// the holder's note is its name.
func (r redlockLocker) Mark(ctx context.Context, resource string, ttl time.Duration, note string) (string, error) {
	l, err := r.c.TryAcquire(redlock.ContextWithHolder(ctx, note), resource, ttl)
	if err == nil {
		return "", lockutil.LeaveToExpire(l)
	}
	if errors.Is(err, redlock.ErrLocked) {
		_, h, _ := r.Record(ctx, resource)
		return h.Name, err
	}
	return "", err
}
