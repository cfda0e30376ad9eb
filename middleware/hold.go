package middleware

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// holding keeps a lock while a handler runs. ctx is cancelled with cause
// redlock.ErrLockLost when the lock is lost; stop ends the extensions.
type holding struct {
	ctx      context.Context
	stop     func()
	progress *atomic.Int64 // last progress report (unix ns), in progress mode
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

// holdOnProgress extends the lock about every TTL/3 only if the handler
// reported progress within the stall bound; otherwise the lock runs out and
// is lost, which cancels the handler. A failed extension is retried soon
// (as KeepAlive does), not a whole period later.
func (m *mw) holdOnProgress(base context.Context, lock *redlock.Lock) holding {
	kctx, cancel := context.WithCancelCause(base)
	start := time.Now()
	last := new(atomic.Int64)
	last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		period := max(m.cfg.ttl/3, time.Millisecond)
		retry := max(min(m.cfg.ttl/20, 100*time.Millisecond), time.Millisecond)
		timer := time.NewTimer(period)
		defer timer.Stop()
		for {
			select {
			case <-done:
				return
			case <-lock.Lost():
				cancel(redlock.ErrLockLost)
				return
			case <-timer.C:
			}
			timer.Reset(period)
			if time.Since(time.Unix(0, last.Load())) > m.cfg.progress {
				continue // stalled: let the lock run out
			}
			if m.cfg.maxHold > 0 && time.Since(start) >= m.cfg.maxHold {
				continue // held as long as allowed: let the lock run out
			}
			ectx, ecancel := context.WithDeadline(kctx, lock.Until())
			if lock.Extend(ectx, m.cfg.ttl) != nil {
				// Retried soon while the lock is valid; if it never
				// succeeds, the loss at Until cancels the handler.
				timer.Reset(retry)
			}
			ecancel()
		}
	}()
	var once sync.Once
	return holding{ctx: kctx, progress: last, stop: func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			cancel(nil)
		})
	}}
}
