package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

type lockState uint8

const (
	stateHeld lockState = iota
	stateReleased
	stateLost
)

// Lock is a held Redlock lock. Its methods are safe for concurrent use.
type Lock struct {
	handle   // the middleware's and the scheduler's calls (mechanics)
	c        *Client
	res      keys
	token    string
	fence    int64
	ttl      time.Duration
	acquired time.Time // start of the winning attempt
	// unsent: nodes whose SET was refused before it was queued. They never
	// held the key: the release skips them, not to grow a dead node's spill.
	unsent uint64

	extendMu sync.Mutex // one extension at a time

	mu         sync.Mutex
	until      time.Time // end of validity (monotonic)
	lastStart  time.Time // start of the last successful acquire or extend
	state      lockState
	slot       uint16 // under WithLimit(limit): the slot held (limit.go), 0 for 1
	limit      uint16
	lost       chan struct{}
	watchdog   *time.Timer
	keepalives []keepalive
	cause      error // why the lock ended: its loss, nil once released
	turn       *turn
	handoff    handoffState
	via        string // how it was acquired: the asynqlock.handover span attribute
	// chainStart: when the first lock of its chain of local hand-overs
	// was decided by a round of its own (gate.go).
	chainStart time.Time
	// withCompletion (completion.go): the record, what the acquisition
	// found of it, and whether the release is to write it.
	record     *completionRecord
	found      recordSeen
	recordDone bool
}

// keepalive is one KeepAlive context of a lock.
type keepalive struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Resource returns the locked resource's name ("" for a nil Lock).
func (l *Lock) Resource() string {
	if l == nil {
		return ""
	}
	return l.res.resource
}

// Token returns the lock's random token (at least 128 bits), the value stored
// on the nodes ("" for a nil Lock).
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Fence returns the fencing token: a number that strictly increases with each
// fenced acquisition of the resource, even after one node lost its data (see
// WithFencing for the exact guarantee and its cost). It is 0 unless the lock
// was acquired WithFencing(). Pass it to storage that rejects writes
// carrying a smaller fence than one already seen.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Until returns the end of the lock's validity on the local monotonic clock.
// Work protected by the lock must end before it. A loss is declared, and
// KeepAlive's context cancelled, a guard before Until: a tenth of the TTL
// within [50ms, 500ms], and at most a quarter of the TTL. It is the zero
// time for a nil Lock.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Lost returns a channel closed when the lock is lost: its validity ended
// without a successful extension, or an extension found its keys gone. It is
// never closed by a release. A nil Lock's channel is nil (it never closes).
func (l *Lock) Lost() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.lost
}

// handle carries the Lock's mechanics, which only lockutil reaches.
type handle = lockutil.Handle

// mechanics are the Lock's calls that lockutil reaches (lockutil.Mechanics).
type mechanics Lock

func (m *mechanics) CompletedRun() int              { return (*Lock)(m).completedRun() }
func (m *mechanics) CompletedAt() time.Time         { return (*Lock)(m).completedAt() }
func (m *mechanics) RecordCompletion(run int) error { return (*Lock)(m).recordCompletion(run) }
func (m *mechanics) ForgetCompletion() error        { return (*Lock)(m).forgetCompletion() }

// lossGuard is how long before Until a loss is declared (lockutil.LossGuard).
func lossGuard(ttl time.Duration) time.Duration { return lockutil.LossGuard(ttl) }

// newLock builds a held lock and arms its watchdog.
func (c *Client) newLock(res keys, token string, fence int64, ttl time.Duration, start, until time.Time, lc *lockConfig) *Lock {
	l := &Lock{
		c: c, res: res, token: token, fence: fence, ttl: ttl, via: handoverNone,
		acquired: start, until: until, lastStart: start, lost: make(chan struct{}),
		record: lc.rec, slot: lc.slot, limit: uint16(lc.limit),
	}
	l.handle = lockutil.NewHandle((*mechanics)(l))
	c.busy.Add(1)
	l.mu.Lock() // the watchdog may fire at once and reads l.watchdog
	l.watchdog = time.AfterFunc(time.Until(until)-lossGuard(ttl), l.checkValidity)
	l.mu.Unlock()
	return l
}

// adoptTurn attaches the caller's place in the local queue: it passes to the
// next local waiter when the lock is released or lost.
func (l *Lock) adoptTurn(t *turn) {
	if t == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		t.leave()
		return
	}
	l.turn = t
}

// checkValidity runs when the validity is about to end: unless an extension
// moved Until meanwhile, the lock is lost (if it is still held).
func (l *Lock) checkValidity() {
	l.mu.Lock()
	left := time.Until(l.until) - lossGuard(l.ttl)
	if l.state == stateHeld && left > 0 {
		l.watchdog.Reset(left)
		l.mu.Unlock()
		return
	}
	l.loseUnlock(ErrLockLost)
}

// loseUnlock, called with l.mu held, marks the lock lost (Lost() closes,
// keep-alives end with cause, the local queue moves on) and unlocks before
// it logs and observes the loss (an observer may call back into the lock).
func (l *Lock) loseUnlock(cause error) {
	if l.state != stateHeld {
		l.mu.Unlock()
		return
	}
	close(l.lost)
	l.endLocked(stateLost, cause)
	l.turn.leave()
	l.dropPrevAtEnd()
	held := time.Since(l.acquired)
	l.mu.Unlock()
	l.c.cfg.logger.Warn("redlock lock lost", "resource", l.res.resource, "cause", cause)
	l.c.observe(Event{Kind: EventLost, Resource: l.res.resource, Duration: held, Err: cause})
}

// endLocked ends the lock's life in this process as state (l.mu held): a
// held lock's watchdog stops and its keep-alive contexts end with cause,
// which KeepAlive gives later callers.
func (l *Lock) endLocked(state lockState, cause error) {
	if l.state == stateHeld {
		l.watchdog.Stop()
		l.c.busy.Add(-1)
		for _, ka := range l.keepalives {
			ka.cancel(cause)
		}
		l.keepalives = nil
	}
	l.state, l.cause = state, cause
}

// Release gives the lock up on every node and wakes waiters. It returns
// ErrNotHeld if the lock was already released, and an error matching
// ErrLockLost if it had been lost: its validity had ended, or fewer than a
// majority of nodes still held its token (its keys are still removed where
// they remain). It returns once a majority confirmed; the other nodes finish
// in the background. Pass a context that is not already cancelled: a cancelled
// one still sends the release but does not wait for it. A nil ctx is refused
// with ErrInvalid and leaves the lock held. A nil Lock is not held:
// ErrNotHeld, as for every method of a nil Lock that returns an error.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return ErrNotHeld
	}
	if ctx == nil {
		return invalidf("nil context: the lock is still held; release it with a live context")
	}
	span := l.c.startSpan(ctx, spanRelease, l.res.resource)
	r, wasLost, err := l.startRelease(ctx)
	if r != nil {
		err = l.finishRelease(ctx, r, wasLost)
	}
	endReleaseSpan(span, err)
	return err
}

// startRelease ends the lock's life here and gives it up: handed over to a
// local waiter (no round), or a release round sent, which finishRelease
// judges. It reports whether the lock had been lost.
func (l *Lock) startRelease(ctx context.Context) (*round, bool, error) {
	wasLost, prev, held := l.markReleased()
	if !held {
		return nil, false, ErrNotHeld
	}
	if prev != "" {
		// A failed early hand-over left the predecessor's token where
		// it did not reach; it goes before this lock's own keys.
		l.unlockQueued(prev, l.c.allNodes())
	}
	var rec *completionRecord // a lost lock's work was not protected to its end
	if !wasLost {
		l.noticeRecord()
		rec = l.written()
	}
	if !wasLost && ctx.Err() == nil {
		// A hand-over that claimed a waiter passes the turn on itself,
		// even when ctx ends before its round is decided.
		if handed, err := l.tryHandOver(ctx); handed {
			return nil, false, err
		}
	}
	c := l.c
	s, args := c.releaseCall(l.res, l.token, int(l.slot), int(l.limit), rec)
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	r := c.broadcast("release", l.res.resource, c.allNodes()&^l.unsent, c.q, deadline, true, args, s)
	return r, wasLost, nil
}

// finishRelease judges the release round (a majority must confirm); the
// next local waiter gets its turn whatever the answers.
func (l *Lock) finishRelease(ctx context.Context, r *round, wasLost bool) error {
	defer l.turn.leave()
	err := r.collect(ctx, classifyOne)
	switch {
	case wasLost:
		err = &opError{kinds: []error{ErrLockLost}, summary: "released after its validity ended"}
	case err != nil:
	case r.t.success():
	case r.t.total-r.t.refused < l.c.q:
		// Too few nodes still held our token: someone else may have held
		// the resource before this release (a node lost its data).
		err = r.err([]error{ErrLockLost}, fmt.Sprintf("only %d of %d nodes still held the lock at release", r.t.ok, r.t.total))
	case l.written() != nil:
		// The record is written in the release's own call: a majority
		// did not confirm either.
		err = r.err([]error{ErrQuorum}, "release and its completion record not confirmed by a majority; the keys expire within the TTL, and a re-delivery may run the work again")
	default:
		err = r.err([]error{ErrQuorum}, "release not confirmed by a majority; the keys expire within the TTL")
	}
	r.free()
	if !wasLost {
		l.noticeRecord() // for callers that queued while the round was out
	}
	return err
}

// markReleased ends the lock's life in this process. It reports whether it
// had been lost, a failed early hand-over's predecessor token left behind,
// and false if it was already released.
func (l *Lock) markReleased() (wasLost bool, prev string, held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == stateReleased {
		return false, "", false
	}
	wasLost = l.state == stateLost || !time.Now().Before(l.until)
	l.endLocked(stateReleased, nil)
	return wasLost, l.handoff.prev, true
}

// ReleaseAsync is Release without the wait for the nodes' answers: sent
// here when a caller of this Client waits for the resource or did lately,
// else from the goroutine that waits (docs/design/REDLOCK.md, "Calls
// internal to the module").
func (m *mechanics) ReleaseAsync(ctx context.Context, done func(error)) {
	l := (*Lock)(m)
	if done == nil {
		done = func(error) {}
	}
	if l == nil {
		done(ErrNotHeld)
		return
	}
	c := l.c
	c.bgMu.Lock()
	if ctx == nil || c.closing {
		c.bgMu.Unlock()
		done(l.Release(ctx))
		return
	}
	c.releasing.Add(1)
	c.bgMu.Unlock()
	if !l.turn.waited() && !c.notify.watched(l.res.channel) {
		go func() {
			defer c.releasing.Done()
			done(l.Release(ctx))
		}()
		return
	}
	span := c.startSpan(ctx, spanRelease, l.res.resource)
	end := func(err error) {
		defer c.releasing.Done()
		endReleaseSpan(span, err)
		done(err)
	}
	r, wasLost, err := l.startRelease(ctx)
	if r == nil { // handed over, or not held
		end(err)
		return
	}
	go func() { end(l.finishRelease(ctx, r, wasLost)) }()
}

// LeaveToExpire ends the lock in this process and leaves its keys to their
// TTL, an end that is not a loss (docs/design/REDLOCK.md, "Calls internal to
// the module").
func (m *mechanics) LeaveToExpire() error {
	l := (*Lock)(m)
	if l == nil {
		return ErrNotHeld
	}
	wasLost, _, held := l.markReleased()
	if !held {
		return ErrNotHeld
	}
	l.turn.leave()
	l.mu.Lock()
	l.dropPrevAtEnd() // a failed early hand-over's predecessor holds on till then
	l.mu.Unlock()
	if wasLost {
		return &opError{kinds: []error{ErrLockLost}, summary: "left to expire after its validity ended"}
	}
	return nil
}
