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
// a failed release is joined otherwise. Acquired WithCompletion, fn is not
// called when the acquisition finds the id's completion record (Run returns
// ErrCompleted), and fn's success records it with the release.
func (c *Client) Run(ctx context.Context, resource string, ttl time.Duration, fn func(context.Context) error, opts ...LockOption) error {
	if fn == nil {
		return invalidf("nil function")
	}
	l, err := c.Acquire(ctx, resource, ttl, opts...)
	if err != nil {
		return err
	}
	kctx, cancel := l.KeepAlive(ctx)
	release := func() error {
		cancel()
		return lockutil.Release(ctx, l)
	}
	done := false
	defer func() {
		if !done { // fn panicked: give the lock up before the panic goes on
			_ = release()
		}
	}()
	ferr := fn(kctx)
	done = true
	lost := context.Cause(kctx)
	rerr := release()
	if errors.Is(lost, ErrLockLost) {
		if errors.Is(ferr, ErrLockLost) {
			return ferr
		}
		return errors.Join(ferr, lost)
	}
	return errors.Join(ferr, rerr)
}
