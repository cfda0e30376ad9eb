package gocronlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
)

// runLock is the gocron.Lock of a run: the job's running lock, kept alive
// until Unlock. gocron gives its job no context of the run, so a loss cannot
// stop the job: it is reported (OutcomeLost, a Warn) and Unlock returns it.
type runLock struct {
	l     *Locker
	ev    Event
	lk    *redlock.Lock
	kctx  context.Context // cancelled with cause redlock.ErrLockLost on loss
	stop  context.CancelFunc
	ended chan struct{} // closed when the loss watch has finished
}

// hold keeps the running lock alive and watches it for a loss.
func (l *Locker) hold(ev Event, lk *redlock.Lock) *runLock {
	kctx, stop := lk.KeepAlive(context.Background())
	r := &runLock{l: l, ev: ev, lk: lk, kctx: kctx, stop: stop, ended: make(chan struct{})}
	go r.watch()
	return r
}

// watch reports the loss of the running lock while the job runs.
func (r *runLock) watch() {
	defer close(r.ended)
	<-r.kctx.Done()
	if cause := context.Cause(r.kctx); errors.Is(cause, redlock.ErrLockLost) {
		ev := r.ev
		ev.Outcome = OutcomeLost
		ev.Err = fmt.Errorf("gocronlock: job %q, tick %s: running lock lost while the job ran: %w", ev.Job, ev.Tick, cause)
		r.l.report(ev)
	}
}

// Unlock ends the keep-alive and releases the running lock (with a context
// of its own: gocron's may be cancelled at shutdown). The tick's record
// stays until it expires. It returns an error matching redlock.ErrLockLost
// if the lock was lost while the job ran; gocron discards it.
func (r *runLock) Unlock(ctx context.Context) error {
	r.stop()
	<-r.ended
	lost := context.Cause(r.kctx) // the loss, if it came before stop
	err := lockutil.Release(ctx, r.lk)
	if errors.Is(lost, redlock.ErrLockLost) {
		return lost
	}
	r.l.completed(r.ev.Job)
	return err
}
