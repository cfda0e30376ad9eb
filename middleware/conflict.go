package middleware

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// acquireFailed returns the error that ends the run when an acquisition
// failed for another reason than a conflict (a busy resource, unreachable
// lock nodes): asynq ended the run (deadline, shutdown), or the lock client
// failed otherwise (closed, bad input). That is an ordinary failure,
// retried and counted as such, never a conflict. It returns nil for a
// conflict.
func (r *taskRun) acquireFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil || !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrQuorum) {
		return fmt.Errorf("%s: acquiring %s: %w", r.name(), r.res, err)
	}
	return nil
}

// conflict applies the policy to a task whose resource is busy (or whose
// lock nodes are unreachable): cause is why the lock was not had. It
// returns a lock only when it ended up waiting for, and getting, the lock.
func (r *taskRun) conflict(ctx context.Context, cause error) (*redlock.Lock, error) {
	m, locked := r.m, errors.Is(cause, redlock.ErrLocked)
	busy := &conflictError{resource: r.res, cause: cause}
	if locked {
		busy.delay = m.delay(r.res)
	}
	action, canPark := m.cfg.policy.action, m.cfg.broker != nil && r.meta.queue != ""
	if errors.Is(cause, redlock.ErrQuorum) && !locked {
		// The lock nodes are unreachable and nobody is known to hold the
		// resource: skipping or failing would drop the task for an outage.
		// Whatever the policy, it is requeued.
		action = actRequeue
	}
	switch {
	case action == actSkip:
		r.m.observe(r.lockEvent(EventConflict, action, cause))
		r.log.Debug("task skipped: resource busy", "cause", cause)
		return nil, nil
	case action == actFail:
		r.m.observe(r.lockEvent(EventConflict, action, cause))
		r.log.Warn("task archived: resource busy", "cause", cause)
		return nil, fmt.Errorf("%s: %w: %w", r.name(), busy, asynq.SkipRetry)
	case canPark && locked: // parked (see WithBroker), or requeued if the broker fails
		p, err := m.park(ctx, r.meta.queue, r.res, r.meta.id)
		m.warnPark(r.res, err)
		if err == nil && p.again {
			return r.waitParked(ctx)
		} else if err == nil {
			return nil, r.parked(ctx, cause, p.nonce, p.fifo, m.backstop(r.res, p.fifo-1))
		}
	}
	switch {
	case !r.meta.budgetSpent():
		r.m.observe(r.lockEvent(EventConflict, actRequeue, cause))
		r.log.Debug("task requeued: resource busy", "cause", cause)
		return nil, busy
	case canPark: // asynq archives it: parked at the head of its FIFO there
		return nil, r.reparkFirst(ctx, cause)
	}
	return r.waitLastRetry(ctx, cause)
}

// waitLastRetry makes a busy task on its last retry, which asynq archives
// on any error, wait for its lock as long as its deadline allows, when it
// cannot be parked (no broker).
func (r *taskRun) waitLastRetry(ctx context.Context, cause error) (*redlock.Lock, error) {
	m := r.m
	dropPlace(ctx)
	wctx, cancel := beforeDeadline(ctx)
	defer cancel()
	wctx, span := m.startWait(wctx, r.res)
	lock, err := m.client.Acquire(wctx, r.res, m.cfg.ttl, r.opts...)
	m.endWait(span, 1, err)
	r.m.observe(r.lockEvent(EventConflict, "wait-exhausted-budget", errors.Join(cause, err)))
	if err != nil {
		r.log.Warn("busy task on its last retry could not get its lock before its deadline: asynq archives it (WithBroker parks it instead)", "err", err)
		return nil, fmt.Errorf("%s on its last retry: %w", r.name(), &conflictError{resource: r.res, cause: err})
	}
	return lock, nil
}

// parked tells that the task was parked after cause at position fifo, its
// conflict marked with nonce and brought back after backstop if nobody
// promotes it, and returns that conflict. On a last retry asynq archives
// it: it is brought back after the backstop unless a promotion did it
// first (reviveLater).
func (r *taskRun) parked(ctx context.Context, cause error, nonce string, fifo int, backstop time.Duration) error {
	m, meta := r.m, r.meta
	m.parkedHere(meta.queue, r.res, fifo)
	if meta.budgetSpent() {
		m.reviveLater(meta.queue, r.res, meta.id, nonce, backstop, fifo > 0)
	}
	ev := r.lockEvent(EventConflict, "park", cause)
	ev.Parked = fifo
	r.m.observe(ev)
	traceParked(ctx, r.res, cause, fifo, backstop)
	r.log.Debug("task parked: resource busy", "cause", cause, "position", fifo, "backstop", backstop, "last_retry", meta.budgetSpent())
	return &conflictError{resource: r.res, cause: cause, delay: backstop, nonce: nonce}
}

// waitParked makes a task that was parked once wait for its lock rather
// than be parked again, past the waiters' bound: it was promoted to run next
// (or came back by its backstop). It waits within the Wait bound (2s at
// least), and is requeued if that ends first; if the process's waiters are
// at their cap across resources, it is parked again first in line.
func (r *taskRun) waitParked(ctx context.Context) (*redlock.Lock, error) {
	m := r.m
	err := error(errWaitCap)
	if m.cfg.room.wait.enter(r.res, m.cfg.limit) { // past the share, within the cap across resources
		var lock *redlock.Lock
		if lock, err = m.waitFor(ctx, r.res, max(m.cfg.policy.wait, defaultWait), r.opts); err == nil {
			return lock, nil
		}
		if ferr := r.acquireFailed(ctx, err); ferr != nil {
			return nil, ferr
		}
	} else if busy := r.reparkFirst(ctx, errWaitCap); busy != nil {
		return nil, busy
	}
	m.onTurn(turnAsk, r.meta.queue, r.res, r.meta.id) // no longer on its way: frees its promotion slot
	if r.meta.budgetSpent() {
		return nil, r.reparkFirst(ctx, err) // a requeue would archive it
	}
	busy := &conflictError{resource: r.res, cause: err, delay: m.delay(r.res)}
	r.m.observe(r.lockEvent(EventConflict, actRequeue, err))
	r.log.Debug("task requeued: parked once already and its resource stayed busy", "cause", err)
	return nil, busy
}

// reparkFirst parks again after cause, at the head of its resource's FIFO,
// a task that was parked once and found no room to wait, or a task on its
// last retry that was not parked: the next promotion brings it back first
// (docs/guide/HOTKEYS.md, "A promoted task without room keeps its turn").
// nil when the broker failed: the caller requeues it; never on a last
// retry, where a requeue would archive the task: it is parked all the
// same, brought back by its backstop alone.
func (r *taskRun) reparkFirst(ctx context.Context, cause error) error {
	nonce, fifo, err := r.m.repark(ctx, r.meta.queue, r.res, r.meta.id)
	r.m.warnPark(r.res, err)
	if err != nil && !r.meta.budgetSpent() {
		return nil
	}
	return r.parked(ctx, cause, nonce, fifo, r.m.backstop(r.res, 0))
}

// warnPark logs a failing park call once per change of state.
func (m *mw) warnPark(res string, err error) {
	m.brokerState(&m.parkErr, res, err, "cannot park tasks in the broker: busy tasks are requeued on a timer", "parking busy tasks again")
}

// Revival of a task parked on its last retry (in asynq's archive, which
// brings nothing back by itself): looked at after its backstop, then, while
// it is still parked or running (its run returning, or promoted meanwhile)
// or the broker fails, again twice as late each time up to reviveStep, for
// reviveFor in all (past it, only an operator brings the task back,
// docs/guide/OPERATIONS.md).
const (
	reviveStep = time.Minute
	reviveFor  = 15 * time.Minute
)

// reviveLater looks, after d, at the task id of queue parked on res on its
// last retry with nonce: while it is archived with nonce in its last error
// (by that very park) it asks for a promotion of res, which moves it back
// to its queue (Inspector.RunTask) through its record, one promoter alone;
// a task whose record was not written (recorded false) or has expired is
// moved here.
func (m *mw) reviveLater(queue, res, id, nonce string, d time.Duration, recorded bool) {
	recordUntil := time.Now().Add(m.parkTTL())
	until := time.Now().Add(reviveFor)
	var try func()
	try = func() {
		info, err := m.cfg.inspector.GetTaskInfo(queue, id)
		if errors.Is(err, asynq.ErrTaskNotFound) {
			return // gone (deleted)
		}
		parked := err == nil && info.State == asynq.TaskStateArchived && strings.Contains(info.LastErr, nonce)
		switch {
		case parked && recorded && time.Now().Before(recordUntil):
			m.onTurn(turnAsk, queue, res, "")
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

// Policy decides what happens to a task whose resource is held by another.
type Policy struct {
	action string // actRequeue, actSkip or actFail, as events name it; "" is unset
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
func Wait(max time.Duration) Policy { return Policy{action: actRequeue, wait: max} }

// Requeue returns the task to asynq at once, to be retried after a short
// jittered delay without consuming its retry budget (see IsFailure and
// RetryDelay).
func Requeue() Policy { return Policy{action: actRequeue} }

// Skip completes the task without running it (logged and observed).
func Skip() Policy { return Policy{action: actSkip} }

// Fail archives the task with asynq.SkipRetry.
func Fail() Policy { return Policy{action: actFail} }

// name names the policy in events and logs.
func (p Policy) name() string {
	if p.wait > 0 {
		return "wait"
	}
	return p.action
}

// event returns an event of kind about this task.
func (r *taskRun) event(kind EventKind, err error) Event {
	return Event{Kind: kind, TaskType: r.t.Type(), TaskID: r.meta.id, Resource: r.res, Err: err}
}

// lockEvent returns an event about getting the lock (acquired, or a
// conflict with its action), which also names the policy and has the time
// since the run began to ask for its lock: how long acquiring took, or
// until the conflict was decided.
func (r *taskRun) lockEvent(kind EventKind, action string, err error) Event {
	ev := r.event(kind, err)
	ev.Policy, ev.Action, ev.Wait = r.m.cfg.policy.name(), action, time.Since(r.start)
	return ev
}

// observeAcquired sends the observer (if any) that the task got its lock;
// after a wait, Handover tells whether it passed from a task of this
// process ("local") or of another ("remote").
func (r *taskRun) observeAcquired(waited bool) {
	if r.m.cfg.observer == nil {
		return
	}
	ev := r.lockEvent(EventAcquired, "", nil)
	if waited {
		ev.Handover = "remote"
		if rel := r.m.lastRelease(r.res); !rel.IsZero() && time.Since(rel) < localHandover {
			ev.Handover = "local"
		}
	}
	r.m.observe(ev)
}

// localHandover: a lock obtained this soon after a task of this process
// released it is taken for passed on locally.
const localHandover = 20 * time.Millisecond

// The pace of a resource spaces out the return of its requeued tasks: each
// conflict takes the next slot of a virtual queue one typical hold time
// apart, kept in the resource's resState (docs/guide/MIDDLEWARE.md,
// "Conflicts", Requeue).
const (
	paceMinHold   = 2 * time.Millisecond
	paceFirstHold = 50 * time.Millisecond // before any run was measured
	paceMinDelay  = 50 * time.Millisecond
	paceMaxDelay  = 30 * time.Second
)

// holdSlots is the size of the table of recent hold times: the hold time
// of a resource whose state was dropped (it met no contention) is kept
// there, in constant memory, until another resource takes its slot, so that
// the first conflict on a resource that ran here lately is paced by its
// measured hold time.
const holdSlots = 1024

// holdTable holds recent hold times by resource hash: slot k%holdSlots
// holds the hold time of the resource whose hash k is in keys.
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

// ranFor records that a task held res for d and released it at now.
func (m *mw) ranFor(res string, d time.Duration, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	if e.hold == 0 {
		e.hold = d
	} else {
		e.hold = (e.hold*7 + d) / 8
	}
	m.holds.set(res, e.hold)
	e.released = now
	m.touched(res, e)
}

// lastRelease returns when a task of this process last released res.
func (m *mw) lastRelease(res string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.res[res]; ok {
		return e.released
	}
	return time.Time{}
}

// delay returns how long a task that met a conflict on res should stay
// away, and notes the contention.
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
