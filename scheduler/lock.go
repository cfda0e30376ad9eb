package scheduler

import (
	"context"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// locker is the part of *redlock.Client the scheduler uses; tests replace it
// with an in-memory lock service on a fake clock.
type locker interface {
	// TryAcquire makes one attempt to lock resource for ttl. It fails with
	// errors matching redlock.ErrLocked (another holder, or a split vote),
	// redlock.ErrQuorum, or ctx's error.
	TryAcquire(ctx context.Context, resource string, ttl time.Duration) (lease, error)
	// Acquire locks resource for ttl, waiting (woken when the holder
	// releases) until ctx ends; then it fails with ctx's error, which may
	// wrap the last attempt's cause.
	Acquire(ctx context.Context, resource string, ttl time.Duration) (lease, error)
}

// lease is a held lock: *redlock.Lock.
type lease interface {
	// KeepAlive extends the lock while ctx lives; the returned context is
	// cancelled with cause redlock.ErrLockLost when the lock is lost.
	KeepAlive(ctx context.Context) (context.Context, context.CancelFunc)
	// Release gives the lock up.
	Release(ctx context.Context) error
}

// redlockLocker adapts a *redlock.Client.
type redlockLocker struct{ c *redlock.Client }

func (r redlockLocker) TryAcquire(ctx context.Context, resource string, ttl time.Duration) (lease, error) {
	l, err := r.c.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (r redlockLocker) Acquire(ctx context.Context, resource string, ttl time.Duration) (lease, error) {
	l, err := r.c.Acquire(ctx, resource, ttl)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return l, nil
}

func lockerFor(c *redlock.Client) (locker, error) {
	if c == nil {
		return nil, invalidf("nil redlock client")
	}
	return redlockLocker{c}, nil
}
