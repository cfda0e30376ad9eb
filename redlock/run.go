package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// Run acquires resource (waiting as Acquire does), runs fn with a context
// that is kept alive by KeepAlive and cancelled with cause ErrLockLost if the
// lock is lost, then releases the lock, even if ctx has been cancelled
// meanwhile. It returns fn's error; if the lock was lost while fn ran, the
// error also matches ErrLockLost (fn's work was not protected to its end);
// a failed release is joined otherwise.
func (c *Client) Run(ctx context.Context, resource string, ttl time.Duration,
	fn func(context.Context) error, opts ...LockOption) (err error) {
	if fn == nil {
		return invalidf("nil function")
	}
	l, err := c.Acquire(ctx, resource, ttl, opts...)
	if err != nil {
		return err
	}
	kctx, cancel := l.KeepAlive(ctx)
	defer func() { // also when fn panics, before the panic goes on
		lost := context.Cause(kctx)
		cancel()
		rerr := lockutil.Release(ctx, l)
		switch {
		case !errors.Is(lost, ErrLockLost):
			err = errors.Join(err, rerr)
		case !errors.Is(err, ErrLockLost):
			err = errors.Join(err, lost)
		}
	}()
	return fn(kctx)
}
