package middleware

import (
	"slices"
	"time"
)

// resState is everything this process keeps about one resource: who of
// the process holds or waits for it, its pace (conflict.go) and its
// promotions per queue (promote.go), in one table (mw.res). An entry exists
// while in use; once idle it is dropped at once unless the resource met
// contention here lately (keepUntil), so an uncontended resource, the common
// case, leaves nothing behind (docs/guide/HOTKEYS.md, "Who promotes"). Kept
// idle entries wait in a FIFO and are dropped in O(1) amortized per task
// (expire), never by a scan of the table.
type resState struct {
	holders int // tasks of this process holding the resource
	waiters int // tasks of this process waiting for it
	owed    string
	promos  []*promoState // one per queue with promotion state

	hold     time.Duration // moving average of how long a task holds the resource
	next     time.Time     // the last requeue slot handed out
	released time.Time     // when a task of this process last released it

	keepUntil time.Time // contention seen: kept while idle until then
	queued    bool      // in the idle FIFO
}

// inUse reports whether the entry must be kept whatever its age.
func (e *resState) inUse() bool {
	return e.holders > 0 || e.waiters > 0 || e.owed != "" ||
		slices.ContainsFunc(e.promos, (*promoState).busy)
}

// contended reports whether the resource met contention in this process
// lately: only then do its starts and ends call the broker to promote.
func (e *resState) contended(now time.Time) bool { return now.Before(e.keepUntil) }

// idleKeep is how long an idle resource that met contention is remembered.
const idleKeep = time.Minute

// expirePerCall bounds the idle entries one call looks at: each entry
// enters the idle FIFO at most once per idle period, so a constant per call
// keeps the FIFO drained.
const expirePerCall = 4

// idleRec is an entry of the idle FIFO, due for a look at due.
type idleRec struct {
	res string
	e   *resState
	due time.Time
}

// entry returns res's state, made if missing; m.mu is held.
func (m *mw) entry(res string) *resState {
	e, ok := m.res[res]
	if !ok {
		m.expire(time.Now())
		e = &resState{hold: m.holds.get(res)}
		m.res[res] = e
	}
	return e
}

// touched drops e or queues it for dropping once idle; call it (m.mu held)
// after every change that may leave e unused.
func (m *mw) touched(res string, e *resState) {
	now := time.Now()
	m.expire(now)
	if !e.queued {
		m.settle(res, e, now)
	}
}

// settle drops e, unless it is in use, or queues it in the idle FIFO
// while it is kept (m.mu held, e not queued).
func (m *mw) settle(res string, e *resState, now time.Time) {
	switch {
	case e.inUse():
	case e.contended(now):
		e.queued = true
		m.idle = append(m.idle, idleRec{res, e, e.keepUntil})
	case m.res[res] == e:
		delete(m.res, res)
	}
}

// contention notes contention on e at now: its state is kept idleKeep.
func (e *resState) contention(now time.Time) {
	e.keepUntil = now.Add(idleKeep)
}

// expire looks at the oldest idle entries, up to expirePerCall of those
// due: one in use again leaves the FIFO (it returns when idle again), one
// whose keepUntil moved on goes to the back, the others are dropped. The
// FIFO is in the order entries became idle, about the order of their due
// times: an entry may outlive its due by up to idleKeep, never longer.
func (m *mw) expire(now time.Time) {
	for range expirePerCall {
		if m.idleHead >= len(m.idle) || now.Before(m.idle[m.idleHead].due) {
			break
		}
		r := m.idle[m.idleHead]
		m.idle[m.idleHead] = idleRec{}
		m.idleHead++
		r.e.queued = false
		m.settle(r.res, r.e, now)
	}
	if m.idleHead > 64 && m.idleHead*2 > len(m.idle) {
		m.idle = append(m.idle[:0], m.idle[m.idleHead:]...)
		m.idleHead = 0
	}
}

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

// countWaiter counts a waiter of res (its cap slot taken) and notes the
// contention.
func (m *mw) countWaiter(res string) {
	m.mu.Lock()
	e := m.entry(res)
	e.waiters++
	e.contention(time.Now())
	m.mu.Unlock()
}

// leaveWait uncounts a waiter of res; one that leaves without the lock
// tells the promoter (onTurn), one that got it tells it at its start.
func (m *mw) leaveWait(res string, got bool) {
	m.cfg.room.wait.leave(res)
	m.mu.Lock()
	if e, ok := m.res[res]; ok {
		e.waiters--
		m.touched(res, e)
	}
	m.mu.Unlock()
	if !got {
		m.onTurn(turnLeft, "", res, "")
	}
}
