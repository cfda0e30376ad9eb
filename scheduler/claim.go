package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
)

// claim wins the tick's lock, or reports why this run ends here. The lock
// is never released after a run: it is the record of the tick, and
// expires with its TTL. It is left to expire at once, so that its expiry,
// which is by design, is not reported by redlock as a lost lock.
func (r *runner) claim(ev *Event, start time.Time, catchUp bool) bool {
	res := tickResource(r.name, ev.Tick)
	ttl := r.tickTTL()
	tl, err := r.try(res, ttl)
	_, bridge := r.job.(*taskJob)
	switch {
	case err == nil && !bridge && !catchUp && time.Since(start) >= r.margin:
		// Won too late to be sure: a replica that won this tick earlier
		// may have a record that already expired. Give it up, do not run.
		// (The bridge goes on: the task ID still keeps a copy out.)
		r.release(tl)
		ev.Outcome = OutcomeLockError
		ev.Err = fmt.Errorf("scheduler: tick lock won %v after the run started, past the %v margin: slow lock nodes?",
			time.Since(start).Round(time.Millisecond), r.margin)
		r.report(*ev)
		return false
	case err == nil:
		_ = tl.LeaveToExpire() // nothing to do about a record already expired
		r.lockedAgain()
		return true
	case r.stopped():
		return false
	case errors.Is(err, redlock.ErrLocked):
		r.lost(*ev, res, []time.Duration{r.baseTTL, ttl}, start, err)
		return false
	case bridge:
		// The task ID alone keeps a second copy out of the queue.
		r.enqueueByID(*ev, err)
		return true
	}
	ev.Outcome, ev.Err = OutcomeLockError, err
	r.report(*ev)
	return false
}

// try locks resource, retrying within the run's budget: contenders that
// start at the same moment may split the nodes so that nobody wins the
// first attempt, and a node may fail once. Retries back off from
// firstRetry, doubling, with jitter; when another replica holds the
// resource they end with its ErrLocked.
//
// The budget only bounds when the last attempt may start: an attempt is not
// cut short (it is bounded by the client's node timeout), so that its
// answer (ErrLocked, ErrQuorum) is never replaced by a context error.
func (r *runner) try(resource string, ttl time.Duration) (lease, error) {
	deadline := time.Now().Add(r.budget)
	backoff := firstRetry
	ctx := r.holderContext(r.host.stopping)
	for {
		l, err := r.locks.TryAcquire(ctx, resource, ttl)
		if err == nil || errors.Is(err, redlock.ErrInvalid) || errors.Is(err, redlock.ErrClosed) || r.stopped() {
			return l, err
		}
		d := backoff/2 + rand.N(backoff)
		if time.Until(deadline) < d {
			return nil, err
		}
		select {
		case <-r.host.stopping.Done():
			return nil, err
		case <-time.After(d):
		}
		backoff *= 2
	}
}

// holderContext names the job (and this replica) in the locks taken under
// ctx, so that other replicas and operators can tell who ran a tick.
func (r *runner) holderContext(ctx context.Context) context.Context {
	name := "job " + r.name
	if r.cfg.replica != "" {
		name += " on " + r.cfg.replica
	}
	return redlock.ContextWithHolder(ctx, name)
}

// release gives a lock up after its work.
func (r *runner) release(l lease) {
	if err := lockutil.Release(context.Background(), l); err != nil && !errors.Is(err, redlock.ErrClosed) && !errors.Is(err, redlock.ErrLockLost) {
		r.cfg.logger.Debug("cron job: lock release failed", "job", r.name, "err", err)
	}
}
