package middleware

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
)

// resState is everything this process keeps about one resource: who of
// the process holds or waits for it, its pace (measured hold time, requeue
// slots), and its promotions per queue. It lives in one table (mw.res) with
// one lifecycle: it exists while in use (a holder, a waiter, a promotion
// call or follow-up, an owed promotion) and, once idle, is dropped at once
// unless the resource met contention in this process lately (keepUntil):
// what is learnt about a contended resource (its hold time, its requeue
// slots, that it has parked tasks) is worth keeping a while, while an
// uncontended resource, the common case, leaves nothing behind. Idle
// entries kept for keepUntil wait in a FIFO and are dropped in O(1)
// amortized per task (expire), never by a scan of the table.
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
	if e.holders > 0 || e.waiters > 0 || e.owed != "" {
		return true
	}
	for _, p := range e.promos {
		if p.busy() {
			return true
		}
	}
	return false
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
	if e.inUse() || e.queued {
		return
	}
	if !e.contended(now) {
		if m.res[res] == e {
			delete(m.res, res)
		}
		return
	}
	e.queued = true
	m.idle = append(m.idle, idleRec{res, e, e.keepUntil})
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
		switch {
		case r.e.inUse():
			r.e.queued = false
		case r.e.contended(now):
			m.idle = append(m.idle, idleRec{r.res, r.e, r.e.keepUntil})
		default:
			r.e.queued = false
			if m.res[r.res] == r.e {
				delete(m.res, r.res)
			}
		}
	}
	if m.idleHead > 64 && m.idleHead*2 > len(m.idle) {
		m.idle = append(m.idle[:0], m.idle[m.idleHead:]...)
		m.idleHead = 0
	}
}

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

// The pace of a resource spaces out the return of its requeued tasks. Each
// conflict takes the next slot of a virtual queue whose slots are one
// typical hold time apart (measured from this process's own runs on the
// resource), so that requeued tasks come back about as fast as the resource
// can serve them instead of all at once: the lock stays busy and the workers
// are not flooded with tasks that can only be requeued again.
//
// asynq keeps retry times in whole seconds, so slots closer together than a
// second come back together at the next second; the pacing then works at
// that granularity, and the waiters carry the hand-offs
// within a second. The pace lives in the resource's resState: it is
// remembered while the resource is in use or met contention lately.

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

// holdSlot is a recent hold time of the resource whose hash is key.
type holdSlot struct {
	key  uint64
	hold time.Duration
}

// holdTable holds recent hold times by resource hash.
type holdTable struct {
	seed  maphash.Seed
	slots [holdSlots]holdSlot
}

func (h *holdTable) slot(res string) (*holdSlot, uint64) {
	k := maphash.String(h.seed, res)
	return &h.slots[k%holdSlots], k
}

// get returns the recent hold time of res (0 when unknown).
func (h *holdTable) get(res string) time.Duration {
	s, k := h.slot(res)
	if s.key != k {
		return 0
	}
	return s.hold
}

func (h *holdTable) set(res string, d time.Duration) {
	s, k := h.slot(res)
	*s = holdSlot{k, d}
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

// typical returns how often a turn of res comes: its typical hold time (a
// guess before any run), over its slots (WithLimit).
func (m *mw) typical(res string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := paceFirstHold
	if e, ok := m.res[res]; ok && e.hold > 0 {
		d = max(e.hold, paceMinHold)
	} else if h := m.holds.get(res); h > 0 {
		d = max(h, paceMinHold)
	}
	return d / time.Duration(m.cfg.limit)
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
	step := max(e.hold, paceMinHold)
	if e.hold == 0 {
		step = paceFirstHold
	}
	step /= time.Duration(m.cfg.limit)             // n slots free up n times as often
	e.next = lockutil.Later(e.next, now).Add(step) // after now: step > 0
	e.contention(e.next)
	d := e.next.Sub(now)
	d += time.Duration(rand.Int64N(int64(step))) // jitter within one slot
	m.touched(res, e)
	return min(max(d, paceMinDelay), paceMaxDelay)
}

// contended notes that a task of this process met res busy.
func (m *mw) contended(res string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	e.contention(time.Now())
	m.touched(res, e)
}
