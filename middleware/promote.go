package middleware

import (
	"context"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// promoteAhead releases parked tasks of res when a task of res starts
// running (started is its ID) or ends (started is ""), so that the next ones
// reach a worker and wait for the turn while this one works: up to
// promoteDepth promoted tasks are on their way at any time, across
// processes. It runs in the background (the task does not wait for the
// broker), and calls for one resource are coalesced: one goroutine at a time
// per resource calls the broker.
func (m *mw) promoteAhead(queue, res, started string) {
	if m.cfg.broker == nil || queue == "" {
		return
	}
	k := promoKey{queue, res}
	m.mu.Lock()
	ids, running := m.promos[k]
	if started != "" {
		ids = append(ids, started)
	}
	m.promos[k] = ids
	m.promoReq[k] = true
	m.mu.Unlock()
	if running {
		return
	}
	go m.promoteLoop(k)
}

// promoteAfter asks for a promotion when a run on res ended, unless the
// turn passes in this process: tasks of it wait for res, or one holds it
// already (an early hand-over may start the next run before this one's end
// is seen here; the ended run still counts as a holder). Then it is owed:
// the next start here asks for it (promoteOnStart), or a waiter leaving
// without the lock (leaveWait), or the next run's end, so a turn passed in
// this process costs one broker call, not two. One queue is owed per
// resource: an owed promotion of another queue is asked for at once.
func (m *mw) promoteAfter(queue, res string) {
	if m.cfg.broker == nil || queue == "" {
		return
	}
	m.mu.Lock()
	passes := m.waiters[res] > 0 || m.holders[res] > 1
	other := ""
	if q, ok := m.owed[res]; ok && q != queue {
		other = q
	}
	if passes {
		m.owed[res] = queue
	} else {
		delete(m.owed, res)
	}
	m.mu.Unlock()
	if other != "" {
		m.promoteAhead(other, res, "")
	}
	if !passes {
		m.promoteAhead(queue, res, "")
	}
}

// promoteOnStart asks for a promotion when the task started (its ID) runs
// on res, which covers one owed by a run's end if of the same queue (tasks
// of one resource may come from several queues).
func (m *mw) promoteOnStart(queue, res, started string) {
	m.promoteAhead(queue, res, started)
	if q := m.takeOwed(res); q != "" && q != queue {
		m.promoteAhead(q, res, "")
	}
}

// takeOwed returns and forgets the queue whose promotion for res a run's
// end left to this process's next event on res ("" when none).
func (m *mw) takeOwed(res string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.owed[res]
	delete(m.owed, res)
	return q
}

// depths bound the promoted tasks of one resource on their way at once.
type depths struct {
	busy int // while other tasks of the queue wait for a worker
	idle int // while none do
}

// promoteDepth is as many promoted tasks as one process lets wait (at
// least 2, so that one promoted task that never starts, its process gone,
// does not stop promotion until its entry is stale) while the queue has a
// backlog, so that other resources' tasks keep their workers; three times
// what one process lets wait while it has none, so that more of the waiting
// tasks land in the holder's process and the turn passes locally, the cheap
// way (docs/HOTKEYS.md).
func (m *mw) promoteDepth() depths {
	n := max(1, m.cfg.maxWaiters)
	return depths{busy: max(2, n), idle: max(2, 3*n)}
}

type promoKey struct{ queue, res string }

func (m *mw) promoteLoop(k promoKey) {
	for {
		m.mu.Lock()
		ids := m.promos[k]
		if !m.promoReq[k] {
			delete(m.promos, k)
			delete(m.promoReq, k)
			m.mu.Unlock()
			return
		}
		m.promos[k], m.promoReq[k] = nil, false
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), lockutil.ReleaseTimeout)
		moved, left, err := promote(ctx, m.cfg.broker, k.queue, k.res, ids, m.promoteDepth(), m.hasParked(k))
		cancel()
		m.promoted(k, moved, left, err)
	}
}

// hasParked reports whether the last promotion of k left records behind.
func (m *mw) hasParked(k promoKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parked[k]
}

// promoted reports one promotion call.
func (m *mw) promoted(k promoKey, moved []promotion, left int, err error) {
	if err != nil {
		m.warnPromote(k.res, err)
		return
	}
	m.mu.Lock()
	if left > 0 {
		m.parked[k] = true
	} else {
		delete(m.parked, k)
	}
	m.mu.Unlock()
	m.warnPromote(k.res, nil)
	for _, p := range moved {
		m.observe(Event{Kind: evPromoted, TaskID: p.id, Resource: k.res, Wait: p.parked, Parked: left})
		m.cfg.logger.Debug("parked task promoted", "task_id", p.id, "queue", k.queue, "resource", k.res, "parked_for", p.parked, "still_parked", left)
	}
}

// warnPromote logs a failing promotion once per change of state: parked
// tasks then come back by their backstop only.
func (m *mw) warnPromote(res string, err error) {
	m.brokerState(&m.promoteErr, res, err, "cannot promote parked tasks: they return after their backstop delay", "promoting parked tasks again")
}

// brokerState logs a broker call's failure once per change of state:
// *failing is the state (guarded by m.mu), down and up the messages.
func (m *mw) brokerState(failing *bool, res string, err error, down, up string) {
	m.mu.Lock()
	was := *failing
	*failing = err != nil
	m.mu.Unlock()
	switch {
	case err != nil && !was:
		m.cfg.logger.Warn(down, "resource", res, "broker", lockutil.Addr(m.cfg.broker), "err", err)
	case err == nil && was:
		m.cfg.logger.Info(up, "resource", res, "broker", lockutil.Addr(m.cfg.broker))
	}
}

// handoverKind tells whether a lock obtained after waiting passed from a task
// of this process ("local") or of another ("remote").
func (m *mw) handoverKind(res string, acquired time.Time) string {
	if r := m.pace.lastRelease(res); !r.IsZero() && acquired.Sub(r) < localHandover {
		return "local"
	}
	return "remote"
}

// localHandover: a lock obtained this soon after a task of this process
// released it is taken for passed on locally.
const localHandover = 20 * time.Millisecond
