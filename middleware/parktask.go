package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// parkTask parks a task that met its resource busy (see WithBroker). done
// is false when parking could not be done (no queue, broker unreachable):
// the caller then requeues the task as without parking, or, on a last
// retry, resubmits it under copyID when set (the ID of a resubmission that
// failed, whose copy may still land).
func (m *mw) parkTask(ctx context.Context, t *asynq.Task, meta taskMeta, res string, cause error, start time.Time, log taskLog) (lock *redlock.Lock, copyID string, done bool, err error) {
	if meta.budgetSpent() {
		return m.parkCopy(ctx, t, meta, res, cause, start, log)
	}
	p, perr := m.park(ctx, meta.queue, res, meta.id, meta.id, false)
	if perr != nil {
		m.warnPark(res, perr)
		return nil, "", false, nil
	}
	m.warnPark(res, nil)
	m.parkedHere(meta.queue, res, p.fifo)
	if p.again {
		lock, err = m.waitParked(ctx, t, meta, res, start, log)
		return lock, "", true, err
	}
	busy := &conflictError{resource: res, cause: cause, delay: m.backstop(res, p.fifo-1), nonce: p.nonce}
	m.observe(Event{Kind: EventConflict, TaskType: t.Type(), TaskID: meta.id, Resource: res, Policy: m.cfg.policy.name(), Action: "park", Wait: time.Since(start), Err: cause, Parked: p.fifo})
	traceParked(ctx, res, cause, p.fifo, busy.delay, "")
	log.Debug("task parked: resource busy", "cause", cause, "position", p.fifo, "backstop", busy.delay)
	return nil, "", true, busy
}

// parkCopy parks a task on its last retry, which asynq would archive on any
// error: a copy is resubmitted to the scheduled set with the backstop delay
// and recorded, and this run is revoked. A resubmission that fails hands
// its copy's ID to the usual last-retry path.
func (m *mw) parkCopy(ctx context.Context, t *asynq.Task, meta taskMeta, res string, cause error, start time.Time, log taskLog) (*redlock.Lock, string, bool, error) {
	if m.cfg.enqueuer == nil {
		return nil, "", false, nil
	}
	again, err := m.wasParked(ctx, meta.queue, meta.id)
	if err != nil {
		m.warnPark(res, err)
		return nil, "", false, nil
	}
	if again {
		// Waits like any parked task; if the wait ends first, the usual
		// last-retry path resubmits it (it must not be archived).
		m.forceWait(res)
		if lock, err := m.waitFor(ctx, res, max(m.cfg.policy.wait, defaultWait)); err == nil {
			return lock, "", true, nil
		}
		m.promoteAhead(meta.queue, res, meta.id) // no longer on its way: frees its promotion slot
		return nil, "", false, nil
	}
	busy := &conflictError{resource: res, cause: cause, delay: m.backstop(res, m.waiting(res))}
	// Recorded first: the record waits parkSettle for its copy to be
	// stored, while a copy promoted by nobody would wait for its backstop.
	id := m.copyID(meta)
	p, perr := m.park(ctx, meta.queue, res, meta.id, id, true)
	m.warnPark(res, perr)
	m.parkedHere(meta.queue, res, p.fifo)
	if err := m.resubmit(ctx, t, meta, id, busy, log); err != nil {
		// The usual last-retry path takes over, with this ID: a copy
		// stored late under it, even one that ran already, must show.
		return nil, id, false, nil
	}
	m.observe(Event{Kind: EventConflict, TaskType: t.Type(), TaskID: meta.id, Resource: res, Policy: m.cfg.policy.name(), Action: "park", Wait: time.Since(start), Err: cause, Parked: p.fifo})
	if perr == nil { // recorded: it comes back on a promotion
		traceParked(ctx, res, cause, p.fifo, busy.delay, id)
	}
	log.Debug("task parked on its last retry: resource busy; a copy was resubmitted", "cause", cause, "copy_id", id, "position", p.fifo, "backstop", busy.delay)
	return nil, "", true, fmt.Errorf("task %s (id %s) parked as %s: %w: %w", t.Type(), meta.id, id, busy, asynq.RevokeTask)
}

// waitParked makes a task that was parked once wait for its lock rather
// than be parked again, past the waiters' bound: it was promoted to run next
// (or came back by its backstop). It waits within the Wait bound (2s at
// least); if that ends first, or the process's waiters are at their cap
// across resources (WithWaitCap), it is requeued.
func (m *mw) waitParked(ctx context.Context, t *asynq.Task, meta taskMeta, res string, start time.Time, log taskLog) (*redlock.Lock, error) {
	err := error(errWaitCap)
	if m.tryWaitParked(res) {
		var lock *redlock.Lock
		if lock, err = m.waitFor(ctx, res, max(m.cfg.policy.wait, defaultWait)); err == nil {
			return lock, nil
		}
		if ctx.Err() != nil || !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrQuorum) {
			return nil, fmt.Errorf("task %s (id %s): acquiring %s: %w", t.Type(), meta.id, res, err)
		}
	}
	m.promoteAhead(meta.queue, res, meta.id) // no longer on its way: frees its promotion slot
	busy := &conflictError{resource: res, cause: err, delay: m.delay(res)}
	m.observe(Event{Kind: EventConflict, TaskType: t.Type(), TaskID: meta.id, Resource: res, Policy: m.cfg.policy.name(), Action: "requeue", Wait: time.Since(start), Err: err})
	log.Debug("task requeued: parked once already and its resource stayed busy", "cause", err)
	return nil, busy
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
