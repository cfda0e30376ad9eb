package middleware

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// pacer spaces out the return of requeued tasks per resource. Each conflict
// takes the next slot of a virtual queue whose slots are one typical hold
// time apart (measured from this process's own runs on the resource), so
// that requeued tasks come back about as fast as the resource can serve them
// instead of all at once: the lock stays busy and the workers are not
// flooded with tasks that can only be requeued again.
//
// asynq keeps retry times in whole seconds, so slots closer together than a
// second come back together at the next second; the pacing then works at
// that granularity, and the waiters (WithMaxWaiters) carry the hand-offs
// within a second.
type pacer struct {
	mu sync.Mutex
	m  map[string]*pace
}

type pace struct {
	hold     time.Duration // moving average of how long a task holds the resource
	next     time.Time     // the last slot handed out
	released time.Time     // when a task of this process last released it
}

const (
	paceMinHold    = 2 * time.Millisecond
	paceFirstHold  = 50 * time.Millisecond // before any run was measured
	paceMinDelay   = 50 * time.Millisecond
	paceMaxDelay   = 30 * time.Second
	paceForgetting = time.Minute // entries idle this long are dropped
	paceSweepAt    = 1024        // map size that triggers a sweep
)

// held records that a task held res for d.
func (p *pacer) held(res string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entry(res)
	if e.hold == 0 {
		e.hold = d
	} else {
		e.hold = (e.hold*7 + d) / 8
	}
}

// typical returns the typical hold time of res (a guess before any run).
func (p *pacer) typical(res string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.entry(res); e.hold > 0 {
		return max(e.hold, paceMinHold)
	}
	return paceFirstHold
}

// releasedAt records that a task of this process released res at t.
func (p *pacer) releasedAt(res string, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entry(res)
	e.released = t
	e.next = lockutil.Later(e.next, t) // keeps the entry from being swept while in use
}

// lastRelease returns when a task of this process last released res.
func (p *pacer) lastRelease(res string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[res]; ok {
		return e.released
	}
	return time.Time{}
}

// delay returns how long a task that met a conflict on res should stay away.
func (p *pacer) delay(res string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	e := p.entry(res)
	step := max(e.hold, paceMinHold)
	if e.hold == 0 {
		step = paceFirstHold
	}
	e.next = lockutil.Later(e.next, now).Add(step)
	d := e.next.Sub(now)
	d += time.Duration(rand.Int64N(int64(step))) // jitter within one slot
	return min(max(d, paceMinDelay), paceMaxDelay)
}

func (p *pacer) entry(res string) *pace {
	if p.m == nil {
		p.m = make(map[string]*pace)
	}
	e, ok := p.m[res]
	if !ok {
		if len(p.m) >= paceSweepAt {
			p.sweep()
		}
		e = &pace{}
		p.m[res] = e
	}
	return e
}

// sweep drops resources with no slot in the recent past.
func (p *pacer) sweep() {
	cutoff := time.Now().Add(-paceForgetting)
	for k, e := range p.m {
		if e.next.Before(cutoff) {
			delete(p.m, k)
		}
	}
}
