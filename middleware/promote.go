package middleware

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/redis/go-redis/v9"
)

// turn is what the promoter observes of a resource (onTurn).
type turn uint8

const (
	turnStart turn = iota // a task of the resource starts running (id)
	turnEnd               // a run of it ended: its lock is released
	turnLeft              // a waiter left without the lock
	turnAsk               // a call is wanted whatever the contention (id: a promoted task no longer on its way)
)

// onTurn is the one observer of a resource's starts and ends that promotes
// its parked tasks (WithBroker), in the background, only for a resource
// that met contention here lately; an end whose turn passes in this process
// owes its call (docs/guide/HOTKEYS.md, "Promote ahead", "Who promotes").
func (m *mw) onTurn(ev turn, queue, res, id string) {
	if m.cfg.broker == nil || queue == "" && ev != turnLeft {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	defer m.touched(res, e)
	if ev != turnAsk {
		if e.owed == "" && !e.contended(time.Now()) {
			return
		}
		if e.owed != "" && e.owed != queue {
			m.request(res, e, e.promo(e.owed), "")
		}
		e.owed = ""
	}
	switch {
	case ev == turnEnd && (e.waiters > 0 || e.holders > m.cfg.limit):
		e.owed = queue
	case ev != turnLeft:
		m.request(res, e, e.promo(queue), id) // an end's id is ""
	}
}

// request asks for a call for p (m.mu held), reporting started (a task ID,
// or ""), and starts its goroutine if none runs.
func (m *mw) request(res string, e *resState, p *promoState, started string) {
	if started != "" {
		p.started = append(p.started, started)
	}
	p.req = true
	if !p.running {
		p.running = true
		go m.promoteLoop(res, e, p)
	}
}

// depths bound the promoted tasks of one resource on their way at once.
type depths struct {
	busy int // while other tasks of the queue wait for a worker
	idle int // while none do
}

// promoteDepth is as many promoted tasks as one process lets wait (at
// least 2), three times that without a backlog, under a Room at most res's
// share (docs/guide/HOTKEYS.md, "Promote ahead", "Several hot resources").
func (m *mw) promoteDepth(res string) depths {
	n, share := max(1, m.cfg.room.maxWaiters)*m.cfg.limit, math.MaxInt
	if m.atOnce == nil {
		share = m.cfg.room.wait.share(res, m.cfg.limit)
	}
	n = min(n, share)
	return depths{busy: max(2, n), idle: max(2, min(3*n, share))}
}

// Follow-up calls after a park or a call that left records, from
// followFirst doubling up to followMax, for followFor after the records
// last changed (docs/guide/HOTKEYS.md, "Who promotes", 1).
const (
	followFirst = 25 * time.Millisecond
	followMax   = time.Second
	followFor   = parkBackstopMax + parkSettle
)

func (m *mw) promoteLoop(res string, e *resState, p *promoState) {
	for {
		m.mu.Lock()
		if !p.req {
			p.running = false
			e.dropPromos()
			m.touched(res, e)
			m.mu.Unlock()
			return
		}
		ids, hint := p.started, p.parked
		p.started, p.req = nil, false
		p.calls++
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), lockutil.ReleaseTimeout)
		moved, left, err := promote(ctx, m.cfg.broker, m.cfg.inspector, p.queue, res, ids, m.promoteDepth(res), hint)
		cancel()
		m.promoted(res, e, p, moved, left, err)
	}
}

// parkedHere notes a task of this process parked on res in queue, fifo
// records long with it: a follow-up call promotes it once its run returned.
func (m *mw) parkedHere(queue, res string, fifo int) {
	if fifo <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	e := m.entry(res)
	e.contention(now)
	p := e.promo(queue)
	p.parked, p.left, p.since, p.backoff = true, fifo, now, followFirst
	m.followUp(res, e, p, true)
}

// followUp schedules a follow-up call for p (m.mu held) unless one is.
// now asks for it even if calls were made meanwhile (a park's record).
func (m *mw) followUp(res string, e *resState, p *promoState, now bool) {
	if p.follow {
		return
	}
	p.follow = true
	d := max(p.backoff, followFirst)
	calls := p.calls
	time.AfterFunc(d, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		p.follow = false
		if !p.parked {
			m.touched(res, e)
			return
		}
		if !now && p.calls != calls {
			m.followUp(res, e, p, false) // others called meanwhile: look later
			return
		}
		p.backoff = min(2*d, followMax)
		m.request(res, e, p, "")
	})
}

// promoted reports one promotion call: the tasks it moved as "promoted"
// events, or else a changed count of records as a "parked" event
// (docs/guide/HOTKEYS.md, "Gauges").
func (m *mw) promoted(res string, e *resState, p *promoState, moved []promotion, left int, err error) {
	m.warnPromote(res, err)
	now := time.Now()
	m.mu.Lock()
	changed := err == nil && (left != p.left || len(moved) > 0)
	if err == nil {
		p.parked, p.left = left > 0, left
	}
	if changed {
		p.since = now
	}
	if len(moved) > 0 {
		p.backoff = followFirst
	}
	p.parked = p.parked && now.Sub(p.since) < followFor // past it, given up: the backstop brings them
	if p.parked {
		e.contention(now)
		m.followUp(res, e, p, false)
	}
	m.mu.Unlock()
	if changed && len(moved) == 0 {
		m.observe(Event{Kind: EventParked, Resource: res, Parked: left})
	}
	for _, pr := range moved {
		m.observe(Event{Kind: EventPromoted, TaskID: pr.id, Resource: res, Wait: pr.parked, Parked: left})
		m.cfg.logger.Debug("parked task promoted", "task_id", pr.id, "queue", p.queue, "resource", res, "parked_for", pr.parked, "still_parked", left)
	}
}

// warnPromote logs a failing promotion once per change of state: parked
// tasks then come back by their backstop only.
func (m *mw) warnPromote(res string, err error) {
	m.brokerState(&m.promoteErr, res, err, "cannot promote parked tasks: they return after their backstop delay", "promoting parked tasks again")
}

// brokerState logs a broker call's failure once per change of state:
// *failing is the state, down and up the messages. A client the application
// closed is no broker failure: Debug only.
func (m *mw) brokerState(failing *failState, res string, err error, down, up string) {
	addr := lockutil.Addr(m.cfg.broker)
	switch {
	case errors.Is(err, redis.ErrClosed):
		m.cfg.logger.Debug(down, "resource", res, "broker", addr, "err", err)
	case err != nil:
		failing.Fail(m.cfg.logger, slog.LevelWarn, down, err, "resource", res, "broker", addr)
	default:
		failing.OK(m.cfg.logger, up, "resource", res, "broker", addr)
	}
}

// promoState is the promotion state of one resource in one queue.
type promoState struct {
	queue   string
	started []string // started task IDs to report at the next call
	req     bool     // a call was asked for since the last one
	running bool     // a goroutine makes the calls (promoteLoop)
	parked  bool     // the last call (or a park here) left records behind
	left    int      // records last reported to the observer
	follow  bool     // a follow-up call is scheduled (followUp)
	calls   int      // calls made, to tell whether others called meanwhile
	backoff time.Duration
	since   time.Time // last park here or call that changed the records
}

// busy reports whether the promotion state must be kept (its parked hint
// alone does not: the resource's contention keeps it).
func (p *promoState) busy() bool { return p.running || p.req || p.follow }

// promo returns e's promotion state of queue, made if missing.
func (e *resState) promo(queue string) *promoState {
	for _, p := range e.promos {
		if p.queue == queue {
			return p
		}
	}
	p := &promoState{queue: queue}
	e.promos = append(e.promos, p)
	return p
}

// dropPromos forgets e's promotion states that hold nothing.
func (e *resState) dropPromos() {
	e.promos = slices.DeleteFunc(e.promos, func(p *promoState) bool { return !p.busy() })
}
