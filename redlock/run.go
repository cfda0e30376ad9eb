package redlock

import (
	"context"
	"errors"
	"time"
)

// releaseTimeout bounds the release Run performs after fn returns.
const releaseTimeout = 5 * time.Second

// Run acquires resource (waiting as Acquire does), runs fn with a context
// that is kept alive by KeepAlive and cancelled with cause ErrLockLost if the
// lock is lost, then releases the lock, even if ctx has been cancelled
// meanwhile. It returns fn's error; if the lock was lost while fn ran, the
// error also matches ErrLockLost (fn's work was not protected to its end);
// a failed release is joined otherwise.
func (c *Client) Run(ctx context.Context, resource string, ttl time.Duration, fn func(context.Context) error, opts ...LockOption) error {
	if fn == nil {
		return invalidf("nil function")
	}
	l, err := c.Acquire(ctx, resource, ttl, opts...)
	if err != nil {
		return err
	}
	kctx, cancel := l.KeepAlive(ctx)
	ferr := fn(kctx)
	lost := context.Cause(kctx)
	cancel()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer rcancel()
	rerr := l.Release(rctx)
	if errors.Is(lost, ErrLockLost) {
		if errors.Is(ferr, ErrLockLost) {
			return ferr
		}
		return errors.Join(ferr, lost)
	}
	if errors.Is(rerr, ErrLockLost) {
		return errors.Join(ferr, rerr)
	}
	if rerr != nil {
		return errors.Join(ferr, rerr)
	}
	return ferr
}
