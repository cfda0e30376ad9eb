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

// claim wins the tick's lock, or reports why this run ends here (ev.Err).
// The lock is never released after a run: it is the record of the tick,
// and expires with its TTL. It is left to expire at once, so that its
// expiry, which is by design, is not reported by redlock as a lost lock.
func (r *runner) claim(ctx context.Context, ev *Event, start time.Time, catchUp bool) bool {
	res := r.tickResource(ev.Tick)
	ttl := r.tickTTL(ev.Tick)
	tl, err := r.try(ctx, res, ttl, true)
	_, bridge := r.job.(*taskJob)
	switch {
	case err == nil && !bridge && !catchUp && time.Since(start) >= r.margin:
		// Won too late to be sure: a replica that won this tick earlier
		// may have a record that already expired. Give it up, do not run.
		// (The bridge goes on: the task ID still keeps a copy out.)
		r.release(tl)
		ev.Outcome = OutcomeLockError
		ev.Err = fmt.Errorf("scheduler: job %q: tick lock won %v after the run started, past the %v margin: slow lock nodes?",
			r.name, time.Since(start).Round(time.Millisecond), r.margin)
	case err == nil:
		_ = tl.LeaveToExpire() // nothing to do about a record already expired
		r.lockedAgain()
		return true
	case ctx.Err() != nil:
		ev.Err = fmt.Errorf("scheduler: job %q stopped: %w", r.name, errors.Join(context.Cause(ctx), err))
		return false
	case errors.Is(err, redlock.ErrLocked):
		r.lost(ctx, ev, res, []time.Duration{r.baseTTL, ttl}, start, err)
	case bridge:
		// The task ID alone keeps a second copy out of the queue.
		r.enqueueByID(*ev, err)
		return true
	default:
		ev.Outcome, ev.Err = OutcomeLockError, fmt.Errorf("scheduler: job %q, tick %s: %w", r.name, ev.Tick.Format(time.RFC3339Nano), err)
	}
	r.report(*ev)
	return false
}

// try locks resource, retrying within the run's budget: contenders that
// start at the same moment may split the nodes so that nobody wins the
// first attempt, and a node may fail once. Retries back off from
// firstRetry, doubling, with jitter; when another replica holds the
// resource they end with its ErrLocked, for a tick's record as soon as a
// quorum of the nodes carry another holder's token (so that a loser leaves
// gocron's singleton or limit slot within a round trip or two).
//
// The budget only bounds when the last attempt may start: an attempt is not
// cut short (it is bounded by the client's node timeout), so that its
// answer (ErrLocked, ErrQuorum) is never replaced by a context error.
func (r *runner) try(ctx context.Context, resource string, ttl time.Duration, record bool) (lease, error) {
	deadline := time.Now().Add(r.budget)
	backoff := firstRetry
	ctx = r.holderContext(ctx)
	for {
		l, err := r.locks.TryAcquire(ctx, resource, ttl)
		if err == nil || errors.Is(err, redlock.ErrInvalid) || errors.Is(err, redlock.ErrClosed) || ctx.Err() != nil {
			return l, err
		}
		if record && errors.Is(err, redlock.ErrLocked) {
			if _, _, taken := r.locks.Record(ctx, resource); taken {
				return nil, err
			}
		}
		d := backoff/2 + rand.N(backoff)
		if time.Until(deadline) < d {
			return nil, err
		}
		select {
		case <-ctx.Done():
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

// lost handles a tick whose lock another replica holds: the common case,
// reported at Debug. The lock is the record of the tick, kept for most of
// the interval; when its age shows that it was won earlier than any
// replica within the skew could have started the tick, this replica (or
// the winner) is beyond the skew: the tick is still skipped, at Warn. An
// interval job's runs may start anywhere in the interval: no such check.
// ttls are the TTLs the record may have been written with.
func (r *runner) lost(ctx context.Context, ev *Event, resource string, ttls []time.Duration, start time.Time, err error) {
	ev.Outcome = OutcomeSkippedOtherReplica
	ev.Err = fmt.Errorf("scheduler: job %q, tick %s taken by another replica: %w", r.name, ev.Tick.Format(time.RFC3339Nano), err)
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	remaining, token, ok := r.locks.Record(ctx, resource)
	cancel()
	r.mu.Lock()
	r.state.otherRanBy = holderOf(token)
	r.mu.Unlock()
	if !ok || r.every > 0 {
		return
	}
	// The youngest age that explains the remaining TTL.
	age := time.Duration(-1)
	for _, ttl := range ttls {
		if a := ttl - remaining; a >= 0 && (age < 0 || a < age) {
			age = a
		}
	}
	earlier := age - time.Since(start) // how long before this run started it was won
	if age >= 0 && earlier > 2*r.cfg.skew+r.budget {
		ev.Outcome = OutcomeSkippedBeyondSkew
		ev.Err = fmt.Errorf("scheduler: tick already run by another replica %v before this run started, more than twice the skew %v: "+
			"a clock offset or delivery delay beyond the skew (%w)", earlier.Round(time.Millisecond), r.cfg.skew, err)
	}
}
