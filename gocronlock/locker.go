package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/go-co-op/gocron/v2"
)

const (
	// minMargin is the least margin of a tick window beyond the skew.
	minMargin = 250 * time.Millisecond
	// firstRetry is the first delay before retrying a lock that was not won.
	firstRetry = 4 * time.Millisecond
)

// Locker is a gocron.Locker whose locks are keyed by job and tick: see New.
type Locker struct {
	locks  *redlock.Client
	cfg    config
	jobs   map[string]schedule
	margin time.Duration // max(skew, minMargin)
	budget time.Duration // how long a Lock tries to win a lock

	mu     sync.Mutex
	states map[string]*jobState
}

var _ gocron.Locker = (*Locker)(nil)

// New returns a gocron.Locker over locks for the jobs registered with
// WithInterval and WithCron, for gocron.WithDistributedLocker or a job's
// gocron.WithDistributedJobLocker. gocron passes Lock only the job's name;
// the locker tells the run's tick from the job's registered schedule and
// its clock, and lets each tick run at most once across replicas:
//
//   - the run's tick is won under "<prefix><job>:<tick in Unix ms>" and
//     never released: the record expires after the end of the tick's
//     window plus twice the skew, so that a replica whose timer fires later
//     within the skew finds it (a lock keyed by the name alone lets every
//     replica run the same interval in turn: gocron issue #841);
//   - the winner then takes "<prefix><job>:running", kept alive while the
//     job runs and released when gocron unlocks it: a run still under way,
//     here or elsewhere, makes the tick skip (ErrRunning).
//
// A Lock that does not go ahead returns an error gocron passes to the job's
// AfterLockError listener; another replica's tick or run matches
// redlock.ErrLocked. Configuration that cannot work is refused with
// ErrInvalid.
func New(locks *redlock.Client, opts ...Option) (*Locker, error) {
	if locks == nil {
		return nil, invalidf("nil redlock client")
	}
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	l := &Locker{locks: locks, cfg: cfg, jobs: map[string]schedule{}, states: map[string]*jobState{}}
	for _, j := range cfg.jobs {
		s, err := cfg.parse(j)
		if err != nil {
			return nil, err
		}
		if _, dup := l.jobs[j.name]; dup {
			return nil, invalidf("job %q registered twice: gocron keys locks by job name, so each job needs a name of its own", j.name)
		}
		l.jobs[j.name] = s
	}
	l.margin = max(cfg.skew, minMargin)
	l.budget = l.margin / 2
	return l, nil
}

// parse checks one registered job and returns its tick rule.
func (c *config) parse(j jobSpec) (schedule, error) {
	switch {
	case j.name == "":
		return nil, invalidf("empty job name: name the job with gocron.WithName (its default, the function's name, changes with the code)")
	case j.spec != "":
		s, _, err := parseCron(j.name, j.spec, c.loc, c.skew, c.now())
		return s, err
	case j.every < time.Millisecond || j.every%time.Millisecond != 0:
		return nil, invalidf("job %q: interval %v: give a whole number of milliseconds, at least 1ms", j.name, j.every)
	}
	return interval{every: j.every}, nil
}

// Lock wins the tick to which a run of job key starting now belongs, then
// the job's running lock, kept alive until the returned lock's Unlock.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	start := time.Now()
	s, ok := l.jobs[key]
	if !ok {
		err := fmt.Errorf("%w: %q (register it with gocronlock.WithInterval or WithCron)", ErrUnknownJob, key)
		l.report(Event{Job: key, Outcome: OutcomeUnknownJob, Err: err})
		return nil, err
	}
	now := l.cfg.now()
	if iv, ok := s.(interval); ok {
		l.checkPace(key, iv.every, now)
	}
	tick, end, ok := s.tick(now)
	if !ok {
		err := fmt.Errorf("%w: job %q, run at %s, skew %v", ErrBeyondSkew, key, now.Format(time.RFC3339Nano), l.cfg.skew)
		l.report(Event{Job: key, Outcome: OutcomeSkippedBeyondSkew, Err: err})
		return nil, err
	}
	ev := Event{Job: key, Tick: tick}
	ctx = redlock.ContextWithHolder(ctx, "gocron job "+key)
	if err := l.claim(ctx, &ev, end.Sub(now), start); err != nil {
		return nil, err
	}
	running, err := l.try(ctx, l.cfg.prefix+key+":running", l.cfg.ttl, false)
	if err != nil {
		return nil, l.refuse(ctx, ev, err, true)
	}
	ev.Outcome = OutcomeRan
	l.report(ev)
	return l.hold(ev, running), nil
}

// claim wins the tick's record and leaves it to expire, or reports why the
// run ends here. untilEnd is the time left in the tick's window.
func (l *Locker) claim(ctx context.Context, ev *Event, untilEnd time.Duration, start time.Time) error {
	res := l.cfg.prefix + ev.Job + ":" + strconv.FormatInt(ev.Tick.UnixMilli(), 10)
	// Replicas start a tick within 2·skew of each other (each within the
	// skew of the nodes); the last one's last attempt comes within the
	// budget, and a win later than the margin is given up below.
	ttl := max(untilEnd, 0) + 2*l.cfg.skew + 2*l.margin
	rec, err := l.try(ctx, res, ttl, true)
	if err != nil {
		return l.refuse(ctx, *ev, err, false)
	}
	if late := time.Since(start); late >= l.margin {
		// Won too late to be sure: a replica that won this tick earlier
		// may have a record that already expired. Give it up, do not run.
		_ = lockutil.Release(ctx, rec)
		err := fmt.Errorf("gocronlock: job %q: tick lock won %v after the run started, past the %v margin: slow lock nodes?",
			ev.Job, late.Round(time.Millisecond), l.margin)
		ev.Outcome, ev.Err = OutcomeLockError, err
		l.report(*ev)
		return err
	}
	_ = rec.LeaveToExpire() // a record already expired is caught by the margin above
	return nil
}

// refuse reports a lock that was not won and returns the error for gocron.
// A job whose context ended (gocron shuts it down) is not reported.
func (l *Locker) refuse(ctx context.Context, ev Event, err error, running bool) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("gocronlock: job %q, tick %s: job stopped: %w", ev.Job, ev.Tick.Format(time.RFC3339Nano), errors.Join(context.Cause(ctx), err))
	case errors.Is(err, redlock.ErrLocked) && running:
		ev.Outcome = OutcomeSkippedOverlap
		err = fmt.Errorf("%w: job %q, tick %s: %w", ErrRunning, ev.Job, ev.Tick.Format(time.RFC3339Nano), err)
	case errors.Is(err, redlock.ErrLocked):
		ev.Outcome = OutcomeSkippedOtherReplica
		err = fmt.Errorf("gocronlock: job %q, tick %s taken by another replica: %w", ev.Job, ev.Tick.Format(time.RFC3339Nano), err)
	default:
		ev.Outcome = OutcomeLockError
		err = fmt.Errorf("gocronlock: job %q, tick %s: %w", ev.Job, ev.Tick.Format(time.RFC3339Nano), err)
	}
	ev.Err = err
	l.report(ev)
	return err
}

// try locks resource, retrying within the budget: contenders that start at
// the same moment may split the nodes so that nobody wins the first
// attempt, and a node may fail once. When another replica holds the
// resource the retries end with its ErrLocked; for a tick's record
// (record), which is never released, they end as soon as a quorum of the
// nodes carry another holder's token, so that a replica that lost the tick
// leaves gocron's singleton or limit slot (in which gocron calls Lock)
// within a round trip or two. An attempt is never cut short, so that its
// answer is never replaced by a context error.
func (l *Locker) try(ctx context.Context, resource string, ttl time.Duration, record bool) (*redlock.Lock, error) {
	deadline := time.Now().Add(l.budget)
	backoff := firstRetry
	for {
		lk, err := l.locks.TryAcquire(ctx, resource, ttl)
		if err == nil || errors.Is(err, redlock.ErrInvalid) || errors.Is(err, redlock.ErrClosed) {
			return lk, err
		}
		if record && errors.Is(err, redlock.ErrLocked) && l.taken(ctx, resource) {
			return nil, err
		}
		d := backoff/2 + rand.N(backoff)
		if time.Until(deadline) < d {
			return nil, err
		}
		select {
		case <-ctx.Done(): // gocron is shutting the job down
			return nil, err
		case <-time.After(d):
		}
		backoff *= 2
	}
}

// taken reports whether a quorum of the nodes carry one holder's token for
// resource (not a split vote, after which nobody has a quorum).
func (l *Locker) taken(ctx context.Context, resource string) bool {
	states, err := l.locks.Inspect(ctx, resource)
	if err != nil {
		return false
	}
	votes := map[string]int{}
	for _, s := range states {
		if s.Err == nil && s.Held() {
			votes[s.Token]++
		}
	}
	for _, n := range votes {
		if n >= l.locks.Admin().Quorum() {
			return true
		}
	}
	return false
}
