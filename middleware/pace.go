package middleware

import (
	"hash/maphash"
	"math/rand/v2"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

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
	step /= time.Duration(m.cfg.limit) // n slots free up n times as often
	e.next = lockutil.Later(e.next, now).Add(step)
	e.contention(lockutil.Later(now, e.next))
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
