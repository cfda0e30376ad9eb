package middleware

import (
	"context"
	"errors"
	"fmt"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/trace"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// acquireFailed returns the error that ends the run when acquiring failed for
// another reason than a conflict (busy resource or unreachable nodes).
func (r *taskRun) acquireFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil || !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrQuorum) {
		return fmt.Errorf("%s: acquiring %s: %w", r.name(), r.res, err)
	}
	return nil
}

// conflict applies the policy to a task whose resource is busy or whose
// lock nodes are unreachable (cause); it returns a lock only if it waited
// for it and got it.
func (r *taskRun) conflict(ctx context.Context, cause error) (*redlock.Lock, error) {
	m, locked := r.m, errors.Is(cause, redlock.ErrLocked)
	busy := &conflictError{resource: r.res, cause: cause}
	if locked {
		busy.delay = m.delay(r.res)
	}
	action, canPark := m.cfg.policy.action, m.cfg.broker != nil && r.meta.queue != ""
	if quorumLost(cause) {
		action = actRequeue // no holder known: an outage drops no task
	}
	if action == actSkip || action == actFail {
		m.observe(r.lockEvent(kindConflict, action, cause))
	}
	switch {
	case action == actSkip:
		r.log.Debug("task skipped: resource busy", "cause", cause)
		return nil, nil
	case action == actFail:
		r.log.Warn("task archived: resource busy", "cause", cause)
		return nil, fmt.Errorf("%s: %w: %w", r.name(), busy, asynq.SkipRetry)
	case canPark && locked: // parked, or requeued if the broker fails
		nonce, fifo, err := m.park(ctx, r.meta.queue, r.res, r.meta.id, false)
		m.warnPark(r.res, err)
		if err == nil && fifo < 0 { // parked once already: it waits instead
			return r.waitParked(ctx)
		} else if err == nil {
			return nil, r.parked(ctx, cause, nonce, fifo, m.backstop(r.res, fifo-1))
		}
	}
	switch {
	case !r.meta.budgetSpent():
		m.observe(r.lockEvent(kindConflict, actRequeue, cause))
		r.log.Debug("task requeued: resource busy", "cause", cause)
		return nil, busy
	case canPark: // asynq archives it: parked at the head of its FIFO there
		return nil, r.reparkFirst(ctx, cause)
	}
	return r.waitLastRetry(ctx, cause)
}

// waitLastRetry makes a busy task on its last retry that cannot be parked
// (asynq archives it on any error) wait for its lock before its deadline.
func (r *taskRun) waitLastRetry(ctx context.Context, cause error) (*redlock.Lock, error) {
	r.place.drop()
	lock, err := r.m.waitRounds(ctx, r.res, math.MaxInt64, r.opts) // one round, to the deadline
	r.m.observe(r.lockEvent(kindConflict, "wait-exhausted-budget", errors.Join(cause, err)))
	if err != nil {
		r.log.Warn("busy task on its last retry could not get its lock before its deadline: "+
			"asynq archives it (WithBroker parks it instead)", "err", err)
		return nil, fmt.Errorf("%s on its last retry: %w", r.name(), &conflictError{resource: r.res, cause: err})
	}
	return lock, nil
}

// parked reports the task parked after cause at position fifo and returns
// its conflict, marked with nonce; on a last retry (asynq archives it)
// reviveLater brings it back after backstop.
func (r *taskRun) parked(ctx context.Context, cause error, nonce string, fifo int,
	backstop time.Duration) error {
	m, meta := r.m, r.meta
	m.parkedHere(meta.queue, r.res, fifo)
	if meta.budgetSpent() {
		m.reviveLater(meta.queue, r.res, meta.id, nonce, backstop, fifo > 0)
	}
	ev := r.lockEvent(kindConflict, "park", cause)
	ev.Parked = fifo
	m.observe(ev)
	if trace.SpanFromContext(ctx).IsRecording() { // the attributes cost allocations
		taskEvent(ctx, eventParked, attrResource.String(r.res), attrReason.String(cause.Error()),
			attrPosition.Int(fifo), attrBackstop.Int64(backstop.Milliseconds()))
	}
	r.log.Debug("task parked: resource busy", "cause", cause, "position", fifo, "backstop", backstop,
		"last_retry", meta.budgetSpent())
	return &conflictError{resource: r.res, cause: cause, delay: backstop, nonce: nonce}
}

// waitParked makes a task parked once wait for its lock past the waiters'
// bound, within the Wait bound (2s at least), and requeues it if that ends
// first; with the wait places full it is parked again first in line.
func (r *taskRun) waitParked(ctx context.Context) (*redlock.Lock, error) {
	m := r.m
	err := error(errWaitCap)
	if e := m.enterWait(r.res, waitPast); e != nil {
		var lock *redlock.Lock
		if lock, err = r.waitFor(ctx, e, max(m.cfg.policy.wait, defaultWait)); err == nil {
			return lock, nil
		}
		if ferr := r.acquireFailed(ctx, err); ferr != nil {
			return nil, ferr
		}
	} else if busy := r.reparkFirst(ctx, errWaitCap); busy != nil {
		return nil, busy
	}
	m.ask(r.meta.queue, r.res, r.meta.id) // no longer on its way: frees its promotion slot
	if r.meta.budgetSpent() {
		return nil, r.reparkFirst(ctx, err) // a requeue would archive it
	}
	m.observe(r.lockEvent(kindConflict, actRequeue, err))
	r.log.Debug("task requeued: parked once already and its resource stayed busy", "cause", err)
	return nil, &conflictError{resource: r.res, cause: err, delay: m.delay(r.res)}
}

// reparkFirst parks again after cause, at the head of its FIFO, a task parked
// once that found no room to wait, or one on its last retry; nil when the
// broker failed (the caller requeues it), but on a last retry.
func (r *taskRun) reparkFirst(ctx context.Context, cause error) error {
	nonce, fifo, err := r.m.park(ctx, r.meta.queue, r.res, r.meta.id, true)
	r.m.warnPark(r.res, err)
	if err != nil && !r.meta.budgetSpent() {
		return nil
	}
	return r.parked(ctx, cause, nonce, fifo, r.m.backstop(r.res, 0))
}

func (m *mw) warnPark(res string, err error) {
	m.brokerState(&m.parkErr, res, err,
		"cannot park tasks in the broker: busy tasks are requeued on a timer", "parking busy tasks again")
}

// A task parked on its last retry is looked at after its backstop, then
// twice as late each time up to reviveStep, for reviveFor (then the sweep).
const (
	reviveStep = time.Minute
	reviveFor  = 15 * time.Minute
)

// reviveLater looks, after d, at the task id parked on its last retry with
// nonce: while archived by that park it is promoted through its record, or
// moved back here without one (recorded false, or expired).
func (m *mw) reviveLater(queue, res, id, nonce string, d time.Duration, recorded bool) {
	recordUntil, until := time.Now().Add(m.parkTTL()), time.Now().Add(reviveFor)
	var try func()
	try = func() {
		info, err := m.cfg.inspector.GetTaskInfo(queue, id)
		if errors.Is(err, asynq.ErrTaskNotFound) {
			return // gone (deleted)
		}
		parked := err == nil && info.State == asynq.TaskStateArchived && strings.Contains(info.LastErr, nonce)
		switch {
		case parked && recorded && time.Now().Before(recordUntil):
			m.ask(queue, res, "")
		case parked:
			err = m.cfg.inspector.RunTask(queue, id)
		case err == nil && info.State != asynq.TaskStateActive:
			return // back already
		}
		m.warnPromote(res, err)
		if d = min(2*d, reviveStep); time.Now().Add(d).Before(until) {
			time.AfterFunc(d, try)
		}
	}
	time.AfterFunc(d, try)
}

// policy decides what happens to a task whose resource is held by another:
// the options Wait, Requeue, Skip and Fail set it (the last one given wins).
type policy struct {
	action string // actRequeue, actSkip or actFail, as events name it
	wait   time.Duration
}

const (
	actRequeue = "requeue"
	actSkip    = "skip"
	actFail    = "fail"
)

// Wait blocks up to max for the lock (woken as soon as the holder releases,
// and never past the task's own deadline), then requeues the task — unless
// the resource changed hands meanwhile (a queue of waiters is being served):
// then the wait is renewed, up to 15 times max; a holder that stays put
// gets the waiter requeued after 2×max (with WithBroker; 5×max without).
func Wait(max time.Duration) Option { return withPolicy(policy{action: actRequeue, wait: max}) }

// Requeue returns the task to asynq at once, to be retried after a short
// jittered delay without consuming its retry budget (see IsFailure and
// RetryDelay).
func Requeue() Option { return withPolicy(policy{action: actRequeue}) }

// Skip completes the task without running it (logged and observed).
func Skip() Option { return withPolicy(policy{action: actSkip}) }

// Fail archives the task with asynq.SkipRetry.
func Fail() Option { return withPolicy(policy{action: actFail}) }

func withPolicy(p policy) Option { return func(c *config) { c.policy = p } }

// name names the policy in events and logs.
func (p policy) name() string {
	if p.wait > 0 {
		return "wait"
	}
	return p.action
}

func (r *taskRun) event(kind string, err error) Event {
	return Event{Kind: kind, TaskType: r.t.Type(), TaskID: r.meta.id, Resource: r.res, Err: err}
}

// lockEvent returns an event about getting the lock (acquired, or a conflict
// and its action), with the policy and the time since the run asked for it.
func (r *taskRun) lockEvent(kind string, action string, err error) Event {
	ev := r.event(kind, err)
	ev.Policy, ev.Action, ev.Wait = r.m.cfg.policy.name(), action, time.Since(r.start)
	return ev
}

// observeAcquired tells the observer that the task got its lock; after a
// wait, Handover tells whether a task of this process released it just before.
func (r *taskRun) observeAcquired(waited bool, released time.Time) {
	if r.m.cfg.observer == nil {
		return
	}
	ev := r.lockEvent(kindAcquired, "", nil)
	if waited {
		ev.Handover = "remote"
		if !released.IsZero() && time.Since(released) < localHandover {
			ev.Handover = "local"
		}
	}
	r.m.observe(ev)
}

// localHandover: a lock obtained this soon after a task of this process
// released it is taken for passed on locally.
const localHandover = 20 * time.Millisecond

// The pace of a resource spaces out its requeued tasks one typical hold
// time apart (docs/guide/MIDDLEWARE.md, "Conflicts", Requeue).
const (
	paceMinHold   = 2 * time.Millisecond
	paceFirstHold = 50 * time.Millisecond // before any run was measured
	paceMinDelay  = 50 * time.Millisecond
	paceMaxDelay  = 30 * time.Second
)

// holdSlots sizes the table that keeps a dropped resource's hold time, in
// constant memory, so that its next conflict is paced by it.
const holdSlots = 1024

type holdTable struct {
	seed  maphash.Seed
	keys  [holdSlots]uint64
	holds [holdSlots]time.Duration
}

// get returns the recent hold time of res (0 when unknown).
func (h *holdTable) get(res string) time.Duration {
	if k := maphash.String(h.seed, res); h.keys[k%holdSlots] == k {
		return h.holds[k%holdSlots]
	}
	return 0
}

func (h *holdTable) set(res string, d time.Duration) {
	k := maphash.String(h.seed, res)
	h.keys[k%holdSlots], h.holds[k%holdSlots] = k, d
}

// delay returns how long a task that met a conflict on res should stay away,
// and notes the contention.
func (m *mw) delay(res string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	e := m.entry(res)
	step := m.turnOf(e.hold) // n slots free up n times as often
	if e.next.Before(now) {
		e.next = now // no slot ahead: the queue starts again now
	}
	e.next = e.next.Add(step) // after now: step > 0
	e.contention(e.next)
	d := e.next.Sub(now)
	d += time.Duration(rand.Int64N(int64(step))) // jitter within one slot
	m.touched(res, e)
	return min(max(d, paceMinDelay), paceMaxDelay)
}
