package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/statelog"
	"github.com/redis/go-redis/v9"
)

// resState is what this process keeps of one resource (mw.res). Once idle it
// is dropped, or kept a while after contention (docs/guide/HOTKEYS.md).
type resState struct {
	holders int // tasks of this process holding the resource
	waiters int // tasks of this process waiting for it

	hold     time.Duration // moving average of how long a task holds the resource
	next     time.Time     // the last requeue slot handed out
	released time.Time     // when a task of this process last released it

	keepUntil time.Time // contention seen: kept while idle until then
	queued    bool      // in the idle FIFO

	owed   string        // queue of an end that passed its turn on here: called for at the next turn
	promos []*promoState // one per queue with promotion state
}

func (e *resState) inUse() bool {
	return e.holders > 0 || e.waiters > 0 || e.owed != "" ||
		slices.ContainsFunc(e.promos, (*promoState).busy)
}

// acquire tries once (under the Wait policy, not while tasks here hold or
// wait for res), then under it waits if there is room; waited reports a lock
// obtained by waiting.
func (r *taskRun) acquire(ctx context.Context) (lock *redlock.Lock, waited bool, err error) {
	m, wait := r.m, r.m.cfg.policy.wait
	if wait > 0 && m.heldHere(r.res) {
		err = errHeldHere
	} else if lock, err = m.client.TryAcquire(ctx, r.res, m.cfg.ttl, r.opts...); err == nil ||
		wait <= 0 || !errors.Is(err, redlock.ErrLocked) {
		return lock, false, err
	}
	how := waitFresh
	if m.cfg.broker == nil {
		how = waitSoft
	}
	if e := m.enterWait(r.res, how); e != nil {
		lock, err = r.waitFor(ctx, e, wait)
	}
	return lock, lock != nil, err
}

var errHeldHere = fmt.Errorf("middleware: %w: held or waited for by tasks of this process", redlock.ErrLocked)

// heldHere: tasks here wait for res or hold all its slots (but for an outage
// seen lately: then TryAcquire fails at once rather than wait behind them).
func (m *mw) heldHere(res string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.res[res]
	return ok && (e.holders >= m.cfg.limit || e.waiters > 0) && !time.Now().Before(m.outage)
}

// requeueTrip: a requeued task is away this long at least (asynq's default
// DelayedTaskCheckInterval); waiting shorter is better.
const requeueTrip = 5 * time.Second

// enterWait takes a wait place for res if the room admits it and counts the
// waiter until leaveWait, returning its entry (nil: no room).
func (m *mw) enterWait(res string, how waitHow) *resState {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	defer m.touched(res, e)
	ahead := time.Duration(e.waiters+1) * m.turnOf(e.hold)
	if !m.cfg.room.admits(res, m.cfg.limit, e.waiters, how, ahead < min(requeueTrip, m.cfg.policy.wait)) {
		return nil
	}
	e.waiters++
	e.keepUntil = time.Now().Add(idleKeep) // contention
	return e
}

// turnOf is how often a turn comes on a resource held typically for hold
// (0: not measured yet), over its slots.
func (m *mw) turnOf(hold time.Duration) time.Duration {
	if hold == 0 {
		hold = paceFirstHold
	}
	return max(hold, paceMinHold) / time.Duration(m.cfg.limit)
}

// leaveWait uncounts the waiter that enterWait counted in e; one that leaves
// without the lock makes the call owed here (one that got it, at its start).
func (m *mw) leaveWait(res string, e *resState, got bool) {
	m.cfg.room.wait.leave(res)
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.touched(res, e)
	e.waiters--
	if !got && e.owed != "" {
		m.request(res, e, e.owed, "")
		e.owed = ""
	}
}

// countHolder is the resource's start: a task of queue (id) holds res until
// ended. It returns the entry and when a task here last released res.
func (m *mw) countHolder(res, queue, id string) (*resState, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	e.holders++
	m.turn(res, e, queue, id, false)
	return e, e.released
}

// ended is the resource's end, once the release is answered; a handler that
// ran from ran (zero: none ran) adds to the moving average of hold times.
func (m *mw) ended(res string, e *resState, queue string, ran time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.touched(res, e)
	e.holders--
	e.released = time.Now()
	if !ran.IsZero() {
		if d := e.released.Sub(ran); e.hold == 0 {
			e.hold = d
		} else {
			e.hold = (e.hold*7 + d) / 8
		}
		m.holds.set(res, e.hold)
	}
	m.turn(res, e, queue, "", true)
}

// ask asks for a call on res in queue whatever the contention (WithBroker);
// id is a promoted task no longer on its way ("" for none).
func (m *mw) ask(queue, res, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	defer m.touched(res, e)
	m.request(res, e, queue, id)
}

// turn is the one observer of a resource's starts (of task id) and ends that
// promotes its parked tasks; an end whose turn passes on in this process owes
// its call (docs/guide/HOTKEYS.md, "Who promotes"). m.mu is held.
func (m *mw) turn(res string, e *resState, queue, id string, end bool) {
	if m.cfg.broker == nil || queue == "" || e.owed == "" && !e.contended(time.Now()) {
		return
	}
	owed := e.owed
	if e.owed = ""; owed == queue {
		owed = ""
	}
	// At an end, limit holders mean a successor here took the ending one's place.
	if end && (e.waiters > 0 || e.holders >= m.cfg.limit) {
		e.owed, queue = queue, ""
	}
	if owed != "" {
		m.request(res, e, owed, "")
	}
	if queue != "" {
		m.request(res, e, queue, id)
	}
}

// request asks for a call for queue reporting started (a task ID, or ""),
// starting its goroutine if none runs; m.mu is held.
func (m *mw) request(res string, e *resState, queue, started string) {
	p := e.promo(queue)
	if started != "" {
		p.started = append(p.started, started)
	}
	p.req = true
	if !p.running {
		p.running = true
		go m.promoteLoop(res, e, p)
	}
}

// Follow-up calls after a park or a call that left records: from followFirst
// doubling up to followMax, until followFor after the records last changed.
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
			e.promos = slices.DeleteFunc(e.promos, func(p *promoState) bool { return !p.busy() })
			m.touched(res, e)
			m.mu.Unlock()
			return
		}
		ids := p.started
		p.started, p.req = nil, false
		m.mu.Unlock()
		d := m.cfg.room.promoteDepth(res, m.cfg.limit, m.atOnce == nil)
		ctx, cancel := context.WithTimeout(context.Background(), lockutil.ReleaseTimeout)
		moved, left, err := promote(ctx, m.cfg.broker, m.cfg.inspector, p.queue, res, ids, d)
		cancel()
		m.promoted(res, e, p, moved, left, err)
	}
}

// parkedHere notes a task parked on res in queue, fifo records long with it:
// a follow-up call promotes it once its run returned.
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
	m.followUp(res, e, p)
}

// followUp schedules a follow-up call for p unless one is (m.mu held).
func (m *mw) followUp(res string, e *resState, p *promoState) {
	if p.follow {
		return
	}
	p.follow = true
	d := max(p.backoff, followFirst)
	time.AfterFunc(d, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if p.follow = false; p.parked {
			p.backoff = min(2*d, followMax)
			m.request(res, e, p.queue, "")
		} else {
			m.touched(res, e)
		}
	})
}

// promoted reports one call: its moved tasks as "promoted" events, or else a
// changed count of records as a "parked" event.
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
		m.followUp(res, e, p)
	}
	m.mu.Unlock()
	if changed && len(moved) == 0 {
		m.observe(Event{Kind: kindParked, Resource: res, Parked: left})
	}
	for _, pr := range moved {
		m.observe(Event{Kind: kindPromoted, TaskID: pr.id, Resource: res, Wait: pr.parked, Parked: left})
		m.cfg.logger.Debug("parked task promoted", "task_id", pr.id, "queue", p.queue, "resource", res,
			"parked_for", pr.parked, "still_parked", left)
	}
}

func (m *mw) warnPromote(res string, err error) {
	m.brokerState(&m.promoteErr, res, err, "cannot promote parked tasks: they return after their backstop delay",
		"promoting parked tasks again")
}

// brokerState logs a broker call's failure once per change of *failing; a
// client the application closed logs at Debug.
func (m *mw) brokerState(failing *statelog.State, res string, err error, down, up string) {
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
	backoff time.Duration
	since   time.Time // last park here or call that changed the records
}

func (p *promoState) busy() bool { return p.running || p.req || p.follow }

// promo returns e's promotion state of queue, made if missing.
func (e *resState) promo(queue string) *promoState {
	i := slices.IndexFunc(e.promos, func(p *promoState) bool { return p.queue == queue })
	if i < 0 {
		e.promos = append(e.promos, &promoState{queue: queue})
		i = len(e.promos) - 1
	}
	return e.promos[i]
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

// stateOf returns a copy of res's state (zero but for its recent hold time).
func (m *mw) stateOf(res string) resState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.res[res]; ok {
		return *e
	}
	return resState{hold: m.holds.get(res)}
}

// touched drops e, or queues it for dropping once idle (m.mu held).
func (m *mw) touched(res string, e *resState) {
	now := time.Now()
	m.expire(now)
	if !e.queued {
		m.settle(res, e, now)
	}
}

// settle drops e unless in use, or queues it while kept (e not queued).
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

// expire settles up to expirePerCall of the oldest idle entries due; one
// may outlive its due by up to idleKeep.
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

// contended: only a resource that met contention here lately promotes.
func (e *resState) contended(now time.Time) bool { return now.Before(e.keepUntil) }

func (e *resState) contention(now time.Time) { e.keepUntil = now.Add(idleKeep) }

// idleKeep is how long an idle resource that met contention is kept;
// expirePerCall bounds the idle entries one call settles (each enters the
// FIFO once per idle period, so a constant keeps it drained).
const (
	idleKeep      = time.Minute
	expirePerCall = 4
)

type idleRec struct {
	res string
	e   *resState
	due time.Time
}
