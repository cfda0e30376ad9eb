package middleware

import (
	"context"
	"errors"
	"fmt"
	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
	"log/slog"
	"slices"
	"time"
)

// resState is everything this process keeps about one resource (mw.res):
// its holders and waiters here, its pace, and the promotion of its parked
// tasks, which observes its starts and ends. Once idle it is dropped unless
// it met contention lately (keepUntil), then from the idle FIFO (expire),
// never by a scan (docs/guide/HOTKEYS.md).
type resState struct {
	holders int // tasks of this process holding the resource
	waiters int // tasks of this process waiting for it

	hold     time.Duration // moving average of how long a task holds the resource
	next     time.Time     // the last requeue slot handed out
	released time.Time     // when a task of this process last released it

	keepUntil time.Time // contention seen: kept while idle until then
	queued    bool      // in the idle FIFO

	owed   string        // the queue of an end whose turn passed here: its call comes at the next turn
	promos []*promoState // one per queue with promotion state
}

// inUse reports whether the entry must be kept whatever its age.
func (e *resState) inUse() bool {
	return e.holders > 0 || e.waiters > 0 || e.owed != "" ||
		slices.ContainsFunc(e.promos, (*promoState).busy)
}

// contended reports whether the resource met contention in this process
// lately: only then do its starts and ends call the broker to promote.
func (e *resState) contended(now time.Time) bool { return now.Before(e.keepUntil) }

// contention notes contention on e at now: its state is kept idleKeep.
func (e *resState) contention(now time.Time) { e.keepUntil = now.Add(idleKeep) }

// idleKeep is how long an idle resource that met contention is remembered.
const idleKeep = time.Minute

// expirePerCall bounds the idle entries one call looks at: each enters the
// FIFO once per idle period, so a constant keeps it drained.
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

// stateOf returns a copy of res's state (zero but for its recent hold
// time when it has none).
func (m *mw) stateOf(res string) resState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.res[res]; ok {
		return *e
	}
	return resState{hold: m.holds.get(res)}
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

// expire settles up to expirePerCall of the oldest idle entries due: one in
// use leaves the FIFO, one contended since goes to the back, the others are
// dropped; an entry may outlive its due by up to idleKeep.
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

// countHolder counts a task of queue (id) that holds res until ended, which
// it returns the entry for, with when a task here last released res: a task
// arriving meanwhile skips TryAcquire (heldHere, docs/guide/HOTKEYS.md).
// It is the resource's start.
func (m *mw) countHolder(res, queue, id string) (*resState, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	e.holders++
	m.turn(res, e, turnStart, queue, id)
	return e, e.released
}

// ended ends what countHolder counted once the task's release is answered:
// a run that got its lock at acquired (zero: none ran) notes its hold time,
// and the resource's end reaches the promoter.
func (m *mw) ended(res string, e *resState, queue string, acquired time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.touched(res, e)
	e.holders--
	if !acquired.IsZero() {
		now := time.Now()
		e.hold = avgHold(e.hold, now.Sub(acquired))
		m.holds.set(res, e.hold)
		e.released = now
	}
	m.turn(res, e, turnEnd, queue, "")
}

// avgHold is the moving average of hold times: avg, then d (avg 0: none yet).
func avgHold(avg, d time.Duration) time.Duration {
	if avg == 0 {
		return d
	}
	return (avg*7 + d) / 8
}

// leaveWait uncounts a waiter of res (entry e); one that leaves without the
// lock tells the promoter, one that got it tells it at its start.
func (m *mw) leaveWait(res string, e *resState, got bool) {
	m.cfg.room.wait.leave(res)
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.touched(res, e)
	e.waiters--
	if !got {
		m.turn(res, e, turnLeft, "", "")
	}
}

// ask asks the promoter for a call on res in queue whatever the contention,
// id being a promoted task no longer on its way ("" for none).
func (m *mw) ask(queue, res, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	defer m.touched(res, e)
	m.turn(res, e, turnAsk, queue, id)
}

// turn is what the promoter observes of a resource.
type turn uint8

const (
	turnStart turn = iota // a task of the resource starts running (id)
	turnEnd               // a run of it ended: its lock is released
	turnLeft              // a waiter left without the lock
	turnAsk               // a call is wanted whatever the contention
)

// turn is the one observer of a resource's starts and ends that promotes
// its parked tasks (WithBroker), in the background, only for a resource
// that met contention here lately; an end whose turn passes in this process
// owes its call (docs/guide/HOTKEYS.md, "Promote ahead", "Who promotes").
// m.mu is held.
func (m *mw) turn(res string, e *resState, ev turn, queue, id string) {
	if m.cfg.broker == nil || queue == "" && ev != turnLeft {
		return
	}
	owed := ""
	if ev != turnAsk {
		if e.owed == "" && !e.contended(time.Now()) {
			return
		}
		owed, e.owed = e.owed, ""
	}
	if owed == queue {
		owed = ""
	}
	if ev == turnEnd && (e.waiters > 0 || e.holders > m.cfg.limit) {
		e.owed, queue = queue, "" // passed on here: called for at the next turn
	}
	for _, c := range [...]struct{ queue, id string }{{owed, ""}, {queue, id}} { // a waiter leaving has no queue
		if c.queue != "" {
			m.request(res, e, c.queue, c.id)
		}
	}
}

// request asks for a call for queue (m.mu held), reporting started (a task
// ID, or ""), and starts its goroutine if none runs.
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
			e.promos = slices.DeleteFunc(e.promos, func(p *promoState) bool { return !p.busy() })
			m.touched(res, e)
			m.mu.Unlock()
			return
		}
		ids, hint := p.started, p.parked
		p.started, p.req = nil, false
		p.calls++
		m.mu.Unlock()
		d := m.cfg.room.promoteDepth(res, m.cfg.limit, m.atOnce == nil)
		ctx, cancel := context.WithTimeout(context.Background(), lockutil.ReleaseTimeout)
		moved, left, err := promote(ctx, m.cfg.broker, m.cfg.inspector, p.queue, res, ids, d, hint)
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
		switch {
		case !p.parked:
			m.touched(res, e)
		case !now && p.calls != calls:
			m.followUp(res, e, p, false) // others called meanwhile: look later
		default:
			p.backoff = min(2*d, followMax)
			m.request(res, e, p.queue, "")
		}
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
		m.cfg.logger.Debug("parked task promoted", "task_id", pr.id, "queue", p.queue, "resource", res,
			"parked_for", pr.parked, "still_parked", left)
	}
}

// warnPromote logs a failing promotion once per change of state: parked
// tasks then come back by their backstop only.
func (m *mw) warnPromote(res string, err error) {
	m.brokerState(&m.promoteErr, res, err, "cannot promote parked tasks: they return after their backstop delay",
		"promoting parked tasks again")
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
	i := slices.IndexFunc(e.promos, func(p *promoState) bool { return p.queue == queue })
	if i < 0 {
		e.promos = append(e.promos, &promoState{queue: queue})
		i = len(e.promos) - 1
	}
	return e.promos[i]
}

// acquire tries once (under the Wait policy, not while tasks of this
// process hold or wait for res: heldHere), then under the Wait policy waits
// if there is room (enterWait). waited reports a lock obtained by waiting.
func (m *mw) acquire(ctx context.Context, res string, opts []redlock.LockOption) (lock *redlock.Lock, waited bool, err error) {
	if m.cfg.policy.wait > 0 && m.heldHere(res) {
		err = errHeldHere
	} else if lock, err = m.client.TryAcquire(ctx, res, m.cfg.ttl, opts...); err == nil || m.cfg.policy.wait <= 0 || !errors.Is(err, redlock.ErrLocked) {
		return lock, false, err
	}
	how := waitFresh
	if m.cfg.broker == nil {
		how = waitSoft
	}
	e := m.enterWait(res, how)
	if e == nil {
		return nil, false, err
	}
	lock, err = m.waitFor(ctx, e, res, m.cfg.policy.wait, opts)
	return lock, err == nil, err
}

// errHeldHere is the conflict of a task that found its resource held or
// waited for by tasks of this process (heldHere).
var errHeldHere = fmt.Errorf("middleware: %w: held or waited for by tasks of this process", redlock.ErrLocked)

// heldHere reports whether tasks of this process wait for res, or hold all
// of its slots, but for an outage seen lately (m.outage), where TryAcquire
// fails at once rather than wait out a bound behind the others.
func (m *mw) heldHere(res string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.res[res]
	return ok && (e.holders >= m.cfg.limit || e.waiters > 0) && !time.Now().Before(m.outage)
}

// requeueTrip is how long a requeued task is away at least with asynq's
// default DelayedTaskCheckInterval: waiting any shorter is better.
const requeueTrip = 5 * time.Second

// enterWait takes a wait place for res if the room admits it, and counts
// its waiter until leaveWait: it returns the entry, nil without room.
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

// turnOf returns how often a turn comes on a resource held typically for
// hold (0: not measured yet), over its slots (WithLimit).
func (m *mw) turnOf(hold time.Duration) time.Duration {
	if hold == 0 {
		hold = paceFirstHold
	}
	return max(hold, paceMinHold) / time.Duration(m.cfg.limit)
}
