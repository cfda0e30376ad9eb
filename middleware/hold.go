package middleware

import (
	"context"

	"github.com/asynqlock/asynqlock/redlock"
)

// holding keeps a lock while a handler runs. ctx is cancelled with cause
// redlock.ErrLockLost when the lock is lost; stop ends the extensions.
type holding struct {
	ctx      context.Context
	stop     func()
	progress *progress // what Progress reports to, in progress mode
}

// hold keeps lock alive for as long as the handler runs. The extensions do
// not follow the task's context: asynq may stop waiting for a handler at its
// deadline, but the lock must outlive the handler itself.
func (m *mw) hold(ctx context.Context, lock *redlock.Lock) holding {
	base := context.WithoutCancel(ctx)
	if m.cfg.progress <= 0 {
		kctx, stop := lock.KeepAlive(base)
		return holding{ctx: kctx, stop: stop}
	}
	return m.holdOnProgress(base, lock)
}
