package middleware

import (
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// errHeldHere is the conflict of a task that found its resource held (all
// its slots) or waited for by tasks of this process: a TryAcquire round
// could only be refused, or take the lock ahead of a waiter.
var errHeldHere = fmt.Errorf("middleware: %w: held or waited for by tasks of this process", redlock.ErrLocked)

// countHolder counts a task of this process that holds res until
// uncountHolder. A task arriving meanwhile goes straight to the wait (or
// to parking), without a TryAcquire round: it joins the lock client's
// local queue a round sooner, where the holder's release hands the lock
// over in one round it does not wait for (docs/guide/HOTKEYS.md). It returns
// res's entry for uncountHolder (no closure: one allocation less per task).
func (m *mw) countHolder(res string) *resState {
	m.mu.Lock()
	e := m.entry(res)
	e.holders++
	m.mu.Unlock()
	return e
}

// uncountHolder ends what countHolder counted.
func (m *mw) uncountHolder(res string, e *resState) {
	m.mu.Lock()
	e.holders--
	m.touched(res, e)
	m.mu.Unlock()
}

// heldHere reports whether tasks of this process wait for res, or hold
// all of its slots (WithLimit).
func (m *mw) heldHere(res string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.res[res]
	return ok && (e.holders >= m.cfg.limit || e.waiters > 0)
}

// sawOutage notes that a wait ended for want of a quorum: for the next
// bound, tasks arriving beside a local holder or waiter try the nodes first
// (TryAcquire fails at once in an outage, and the task is requeued) rather
// than each waiting out a bound behind the others.
func (m *mw) sawOutage(bound time.Duration) {
	m.mu.Lock()
	m.outage = time.Now().Add(bound)
	m.mu.Unlock()
}

func (m *mw) inOutage() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Now().Before(m.outage)
}
