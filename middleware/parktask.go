package middleware

import (
	"context"
	"fmt"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// parkTask parks a task that met its resource busy (see WithBroker); cause
// is why the lock was not had. done is false when parking could not be
// done (no queue, broker unreachable): the caller then requeues the task as
// without parking, or, on a last retry, resubmits it under copyID when set
// (the ID of a resubmission that failed, whose copy may still land).
func (r *taskRun) parkTask(ctx context.Context, cause error) (lock *redlock.Lock, copyID string, done bool, err error) {
	m, meta := r.m, r.meta
	if meta.budgetSpent() {
		return r.parkCopy(ctx, cause)
	}
	p, perr := m.park(ctx, meta.queue, r.res, meta.id, meta.id, false)
	if perr != nil {
		m.warnPark(r.res, perr)
		return nil, "", false, nil
	}
	m.warnPark(r.res, nil)
	m.parkedHere(meta.queue, r.res, p.fifo)
	if p.again {
		lock, err = r.waitParked(ctx)
		return lock, "", true, err
	}
	busy := &conflictError{resource: r.res, cause: cause, delay: m.backstop(r.res, p.fifo-1), nonce: p.nonce}
	r.observeParked(cause, p.fifo)
	traceParked(ctx, r.res, cause, p.fifo, busy.delay, "")
	r.log.Debug("task parked: resource busy", "cause", cause, "position", p.fifo, "backstop", busy.delay)
	return nil, "", true, busy
}

// parkCopy parks a task on its last retry, which asynq would archive on any
// error: a copy is resubmitted to the scheduled set with the backstop delay
// and recorded, and this run is revoked. A resubmission that fails hands
// its copy's ID to the usual last-retry path.
func (r *taskRun) parkCopy(ctx context.Context, cause error) (*redlock.Lock, string, bool, error) {
	m, meta := r.m, r.meta
	if m.cfg.enqueuer == nil {
		return nil, "", false, nil
	}
	again, err := m.wasParked(ctx, meta.queue, meta.id)
	if err != nil {
		m.warnPark(r.res, err)
		return nil, "", false, nil
	}
	if again {
		// Waits like any parked task; if the wait ends first, the usual
		// last-retry path resubmits it (it must not be archived).
		m.forceWait(r.res)
		if lock, err := m.waitFor(ctx, r.res, max(m.cfg.policy.wait, defaultWait), r.opts); err == nil {
			return lock, "", true, nil
		}
		m.promoteAhead(meta.queue, r.res, meta.id) // no longer on its way: frees its promotion slot
		return nil, "", false, nil
	}
	busy := &conflictError{resource: r.res, cause: cause, delay: m.backstop(r.res, m.waiting(r.res))}
	// Recorded first: the record waits parkSettle for its copy to be
	// stored, while a copy promoted by nobody would wait for its backstop.
	id := r.copyID()
	p, perr := m.park(ctx, meta.queue, r.res, meta.id, id, true)
	m.warnPark(r.res, perr)
	m.parkedHere(meta.queue, r.res, p.fifo)
	if err := r.resubmit(ctx, id, busy); err != nil {
		// The usual last-retry path takes over, with this ID: a copy
		// stored late under it, even one that ran already, must show.
		return nil, id, false, nil
	}
	m.warnResubmit(r.res, nil)
	r.observeParked(cause, p.fifo)
	if perr == nil { // recorded: it comes back on a promotion
		traceParked(ctx, r.res, cause, p.fifo, busy.delay, id)
	}
	r.log.Debug("task parked on its last retry: resource busy; a copy was resubmitted", "cause", cause, "copy_id", id, "position", p.fifo, "backstop", busy.delay)
	return nil, "", true, fmt.Errorf("%s parked as %s: %w: %w", r.name(), id, busy, asynq.RevokeTask)
}

// observeParked reports the task parked after cause, at position fifo.
func (r *taskRun) observeParked(cause error, fifo int) {
	ev := r.lockEvent(EventConflict, "park", cause)
	ev.Parked = fifo
	r.observeWait(ev)
}

// waitParked makes a task that was parked once wait for its lock rather
// than be parked again, past the waiters' bound: it was promoted to run next
// (or came back by its backstop). It waits within the Wait bound (2s at
// least), and is requeued if that ends first; if the process's waiters are
// at their cap across resources (a Room's wait places), it is parked again first in
// line (reparkFirst).
func (r *taskRun) waitParked(ctx context.Context) (*redlock.Lock, error) {
	m := r.m
	err := error(errWaitCap)
	if m.tryWaitParked(r.res) {
		var lock *redlock.Lock
		if lock, err = m.waitFor(ctx, r.res, max(m.cfg.policy.wait, defaultWait), r.opts); err == nil {
			return lock, nil
		}
		if ferr := r.acquireFailed(ctx, err); ferr != nil {
			return nil, ferr
		}
	} else if busy := r.reparkFirst(ctx); busy != nil {
		return nil, busy
	}
	m.promoteAhead(r.meta.queue, r.res, r.meta.id) // no longer on its way: frees its promotion slot
	busy := &conflictError{resource: r.res, cause: err, delay: m.delay(r.res)}
	r.observeWait(r.lockEvent(EventConflict, "requeue", err))
	r.log.Debug("task requeued: parked once already and its resource stayed busy", "cause", err)
	return nil, busy
}

// reparkFirst parks again, at the head of its resource's FIFO, a task
// that was parked once and found no room to wait (the process's waiters
// at their cap across resources): the next promotion brings it back first,
// where a requeue would keep it away a trip through asynq's retry set (a
// second or more) behind the tasks parked after it, and its worker is free
// for other tasks meanwhile. Its promotion slot frees itself (the promote
// script drops a promoted task that is neither pending nor active). nil
// when the broker failed: the caller requeues it.
func (r *taskRun) reparkFirst(ctx context.Context) error {
	m, meta := r.m, r.meta
	nonce, fifo, err := m.repark(ctx, meta.queue, r.res, meta.id)
	m.warnPark(r.res, err)
	if err != nil {
		return nil
	}
	m.parkedHere(meta.queue, r.res, fifo)
	busy := &conflictError{resource: r.res, cause: errWaitCap, delay: m.backstop(r.res, 0), nonce: nonce}
	r.observeParked(errWaitCap, 1)
	traceParked(ctx, r.res, errWaitCap, 1, busy.delay, "")
	r.log.Debug("task parked again, first in line: no room to wait", "backstop", busy.delay)
	return busy
}

// waiting returns how many tasks of this process wait for res.
func (m *mw) waiting(res string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.res[res]; ok {
		return e.waiters
	}
	return 0
}

// warnPark logs a failing park call once per change of state.
func (m *mw) warnPark(res string, err error) {
	m.brokerState(&m.parkErr, res, err, "cannot park tasks in the broker: busy tasks are requeued on a timer", "parking busy tasks again")
}
