package lockutil

import (
	"context"
	"time"
)

// ReleaseTimeout bounds a release (or a similar short call to the lock or
// broker nodes) made after the work it protected is done.
const ReleaseTimeout = 5 * time.Second

// Releaser is a held lock (*redlock.Lock).
type Releaser interface {
	Release(ctx context.Context) error
}

// Release gives l up with a context of its own, bounded by ReleaseTimeout:
// the caller's may be cancelled already (a deadline, a shutdown), and a lock
// left held would block its resource for a whole TTL. Values of ctx (trace
// IDs, holder names) are kept.
func Release(ctx context.Context, l Releaser) error {
	rctx, cancel := Detached(ctx)
	defer cancel()
	return l.Release(rctx)
}

// Detached returns a context that keeps ctx's values but not its
// cancellation, bounded by ReleaseTimeout: for clean-up calls after ctx may
// have ended.
func Detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
}
