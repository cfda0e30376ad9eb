package middleware

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// Progress reports that the handler is making progress: in progress mode
// (WithProgress) the lock is extended only while it does; a no-op otherwise.
func Progress(ctx context.Context) {
	if p, ok := ctx.Value(progressKey{}).(*progress); ok {
		p.report()
	}
}

type progressKey struct{}

// progress is what Progress reports to in progress mode (WithProgress).
type progress struct {
	last atomic.Int64  // unix ns of the last report
	note chan struct{} // signalled on a report, without blocking
}

func (p *progress) report() {
	p.last.Store(time.Now().UnixNano())
	select {
	case p.note <- struct{}{}:
	default:
	}
}

// holdOnProgress keeps g's lock alive while the handler reports progress:
// after a stall it runs out (cancelling the handler) unless a report comes.
func (m *mw) holdOnProgress(g *guard) {
	base := context.WithoutCancel(g.Context)
	hctx, cancel := context.WithCancelCause(base) // cancelled with the loss
	g.progress = &progress{note: make(chan struct{}, 1)}
	g.progress.last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Go(func() { m.watchProgress(base, g.lock, g.progress, hctx.Done(), cancel) })
	g.watch(hctx, func() { // called once, by g.end, after it read the loss
		cancel(nil)
		wg.Wait()
	})
}

// watchProgress runs the keep-alive while progress is reported, until done
// is closed or the lock is lost (lost, called with the cause, closes done).
func (m *mw) watchProgress(base context.Context, lock *redlock.Lock, p *progress, done <-chan struct{}, lost context.CancelCauseFunc) {
	kctx, stopKA := lock.KeepAlive(base)
	defer func() { stopKA() }()
	kept := kctx.Done()         // the keep-alive's end; nil while stalled
	var ran <-chan struct{}     // the lock's loss, watched while stalled
	var resumed <-chan struct{} // a report, watched while stalled
	stall := time.NewTimer(m.cfg.progress)
	defer stall.Stop()
	for {
		select {
		case <-done:
			return
		case <-kept:
			if cause := context.Cause(kctx); errors.Is(cause, redlock.ErrLockLost) {
				lost(cause)
				return
			}
			kept, ran = nil, lock.Lost() // ended otherwise (client closed): the lock runs out
		case <-ran:
			lost(redlock.ErrLockLost)
			return
		case <-stall.C:
			select { // a report older than this check is no resumption
			case <-p.note:
			default:
			}
			if d := time.Since(time.Unix(0, p.last.Load())); d < m.cfg.progress {
				stall.Reset(m.cfg.progress - d)
				continue
			}
			stopKA() // stalled: let the lock run out
			kept, ran, resumed = nil, lock.Lost(), p.note
		case <-resumed:
			kctx, stopKA = lock.KeepAlive(base)
			kept, ran, resumed = kctx.Done(), nil, nil
			stall.Reset(m.cfg.progress)
		}
	}
}
