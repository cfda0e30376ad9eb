package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	mrand "math/rand/v2"
	"time"
)

// keys are the Redis names used for one resource. The hash tag keeps them in
// one slot should a node be a Redis Cluster (see keyOf).
type keys struct {
	resource string
	key      string // the lock: token with a TTL (a slot's key under WithLimit)
	fenceKey string // the fencing counter
	channel  string // release announcements
}

func (c *Client) keysFor(resource string) keys {
	k := keyOf(c.cfg.prefix, resource)
	return keys{resource: resource, key: k, fenceKey: k + fenceSuffix, channel: k + channelSuffix}
}

// fenceSuffix follows a lock key in the name of its fencing counter.
const fenceSuffix = ":fence"

// channelSuffix follows a lock key in the name of its release channel
// (lua/release_many.lua builds it too).
const channelSuffix = ":released"

func (k keys) lockKeys() []string { return []string{k.key} }
func (k keys) bothKeys() []string { return []string{k.key, k.fenceKey} }

// minTTL is the smallest TTL that can leave a positive validity after an
// attempt that used its whole node timeout.
func (c *Client) minTTL() time.Duration {
	return time.Duration(float64(c.cfg.nodeTimeout+driftFloor) / (1 - c.cfg.driftFactor))
}

// prepare validates a call's input and options; a context that has
// already ended is reported after bad input.
func (c *Client) prepare(ctx context.Context, resource string, ttl time.Duration, opts []LockOption) (time.Duration, *lockConfig, error) {
	if err := c.usable(ctx); err != nil {
		return 0, nil, err
	}
	if resource == "" {
		return 0, nil, invalidf("empty resource name")
	}
	if err := c.checkTTL(ttl); err != nil {
		return 0, nil, err
	}
	lc := &lockConfig{}
	for _, o := range opts {
		if o == nil {
			return 0, nil, invalidf("nil lock option")
		}
		o(lc)
	}
	if lc.maxHold < 0 {
		return 0, nil, invalidf("max hold must not be negative, got %v", lc.maxHold)
	}
	if err := checkLimit(lc); err != nil {
		return 0, nil, err
	}
	if err := lc.checkCompletion(); err != nil {
		return 0, nil, err
	}
	lc.rec = c.recordOf(resource, lc)
	lc.suffix = c.holderSuffix(ctx, lc)
	c.awaitWarm(ctx) // a fresh client's first call: see awaitWarm
	return ttl.Truncate(time.Millisecond), lc, ctx.Err()
}

// checkTTL rejects TTLs that cannot leave any validity.
func (c *Client) checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return invalidf("ttl must be positive, got %v", ttl)
	}
	if m := c.minTTL(); ttl.Truncate(time.Millisecond) <= m {
		return invalidf("ttl %v is too small: with node timeout %v and drift factor %v it must exceed %v",
			ttl, c.cfg.nodeTimeout, c.cfg.driftFactor, m.Round(time.Microsecond))
	}
	return nil
}

// TryAcquire makes one attempt to lock resource for ttl. It fails with an
// error matching ErrLocked when another holder has it, ErrQuorum when too many
// nodes failed, or the context's error.
func (c *Client) TryAcquire(ctx context.Context, resource string, ttl time.Duration, opts ...LockOption) (l *Lock, err error) {
	begin := time.Now()
	span := c.startSpan(ctx, spanAcquire, resource)
	defer func() { endAcquireSpan(span, l, 1, err) }()
	ttl, lc, err := c.prepare(ctx, resource, ttl, opts)
	if err != nil {
		return nil, err
	}
	if lc.limit > 1 {
		l, err = c.trySlots(ctx, resource, ttl, lc, -1, nil)
	} else {
		l, err = c.attempt(ctx, c.keysFor(resource), ttl, lc, nil)
	}
	c.acquired(resource, begin, 1, err)
	return l, err
}

// Acquire locks resource for ttl, waiting as long as ctx allows. Waiters are
// woken by release announcements (pub/sub) and otherwise retry after a random
// delay; waiters of the same Client queue in FIFO order. When ctx ends it
// returns ctx's error wrapped together with the last attempt's cause, so both
// errors.Is(err, context.DeadlineExceeded) and errors.Is(err, ErrLocked) hold.
func (c *Client) Acquire(ctx context.Context, resource string, ttl time.Duration, opts ...LockOption) (l *Lock, err error) {
	begin := time.Now()
	span := c.startSpan(ctx, spanAcquire, resource)
	attempts := 0
	defer func() { endAcquireSpan(span, l, attempts, err) }()
	ttl, lc, err := c.prepare(ctx, resource, ttl, opts)
	if err != nil {
		return nil, err
	}
	if lc.limit > 1 {
		l, attempts, err = c.acquireLimited(ctx, resource, ttl, lc)
	} else {
		l, attempts, err = c.acquireLoop(ctx, c.keysFor(resource), ttl, lc)
	}
	c.acquired(resource, begin, attempts, err)
	return l, err
}

func (c *Client) acquireLoop(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig) (*Lock, int, error) {
	var t *turn
	tk := newTicket()
	if c.cfg.localQueue {
		var l *Lock
		var err error
		t, l, err = c.gates.enter(ctx, k.key, c.closed, c.waitReq(k, ttl, lc, tk))
		if l != nil {
			if err == nil {
				l.via = handoverLocal
				return l, 1, nil // handed over by the previous holder
			}
			if !c.spawn(func() { _ = l.Release(context.Background()) }) {
				_ = l.Release(context.Background())
			}
		}
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, 0, err
			}
			// The context ended while another caller of this client held
			// or was acquiring the resource: it was locked all along.
			return nil, 0, waitError(ctx, nil, &opError{kinds: []error{ErrLocked}, summary: "waited behind another caller of this client"})
		}
	}
	return c.attemptLoop(ctx, k, ttl, lc, t, tk)
}

// attemptLoop is Acquire's rounds once the caller has its local turn t. The
// first round is a plain one (SET NX, or the fencing script), as TryAcquire's:
// it takes a free key and cannot take one reserved for a queued waiter, so
// an uncontended Acquire costs what Redlock costs. Only once that fails does
// the caller queue on the nodes with ticket tk, taken before the first round
// so that its place in the FIFO is its arrival (docs/design/HANDOVER.md). A
// resource whose releases this client watches (a waiter of it, now or
// within subscriptionLinger) was contended lately: its first round queues.
func (c *Client) attemptLoop(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig, t *turn, tk *ticket) (*Lock, int, error) {
	p := pauser{c: c}
	defer p.stop()
	var last error
	var queued *ticket // nil until the first round failed: nothing to leave on the nodes
	if c.notify.watched(k.channel) {
		// Contended here lately: a SET NX round would most likely be
		// refused, so queue from the first round, watching already.
		p.watch(ctx, k, tk)
		queued = tk
	}
	for attempts := 1; ; attempts++ {
		p.reset()
		l, err := c.attempt(ctx, k, ttl, lc, queued)
		if err == nil {
			if queued != nil && attempts > 1 {
				l.via = handoverRemote
			}
			l.adoptTurn(t)
			l.refreshLooks()
			return l, attempts, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			c.giveUp(k, queued, t)
			return nil, attempts, waitError(ctx, err, last)
		}
		queued = tk
		last = err
		if p.w == nil && errors.Is(err, ErrLocked) {
			// Subscribe to the release, then try once more at once: the
			// holder may have released between the attempt and now.
			p.watch(ctx, k, tk)
			continue
		}
		switch err := p.pause(ctx, err); {
		case errors.Is(err, ErrClosed):
			t.leave()
			return nil, attempts, ErrClosed
		case err != nil:
			c.giveUp(k, queued, t)
			return nil, attempts, waitError(ctx, nil, last)
		}
	}
}

// pauser is an Acquire's wait between two attempts: for a release
// announcement (once w watches the resource), the retry delay, the end of
// ctx or the client's close.
type pauser struct {
	c     *Client
	w     *watch
	timer *time.Timer
	woke  bool // the last pause ended with an announcement
}

// watch starts listening for k's releases announced to the waiter of ticket tk.
func (p *pauser) watch(ctx context.Context, k keys, tk *ticket) {
	p.w = p.c.notify.watch(ctx, k.channel)
	p.w.forWaiter(tk.id)
}

// reset forgets the announcements heard before the next attempt.
func (p *pauser) reset() {
	if p.w != nil {
		p.w.reset()
	}
}

// stop ends the watch and the timer.
func (p *pauser) stop() {
	if p.w != nil {
		p.w.close()
	}
	if p.timer != nil {
		p.timer.Stop()
	}
}

// pause waits before the attempt that follows one that failed with err. It
// returns ctx's error or ErrClosed when the wait must end instead.
func (p *pauser) pause(ctx context.Context, err error) error { return p.pauseOr(ctx, err, nil) }

// delayAfter is the wait before the next attempt after a failed one, when no
// release notification comes first.
func (c *Client) delayAfter(err error) time.Duration {
	var oe *opError
	if errors.As(err, &oe) && oe.split {
		// Contenders split the nodes and nobody won: no release will be
		// announced, so retry after a short random delay instead, spread
		// over the attempt's length (a silent node makes a split last a
		// whole node timeout; retrying inside it collides again).
		return c.splitDelay(oe.took)
	}
	return c.retryDelay()
}

// waitError reports a wait that ended with ctx: ctx's error, wrapping the
// last attempt's cause.
func waitError(ctx context.Context, err, last error) error {
	cerr := ctx.Err()
	if cerr == nil {
		return err
	}
	if last == nil && err != nil && !errors.Is(err, cerr) {
		last = err
	}
	if last == nil {
		return cerr
	}
	return fmt.Errorf("%w (last attempt: %w)", cerr, last)
}

// retryDelay is a random delay in [retryMin, retryMax].
func (c *Client) retryDelay() time.Duration {
	span := c.cfg.retryMax - c.cfg.retryMin
	if span <= 0 {
		return c.cfg.retryMin
	}
	return c.cfg.retryMin + time.Duration(mrand.Int64N(int64(span)+1))
}

// splitDelay is the short random delay after a split vote: long enough
// (several round trips, or the length of the failed attempt) for one
// contender to go first.
func (c *Client) splitDelay(took time.Duration) time.Duration {
	span := max(min(c.cfg.retryMin, 5*time.Millisecond), 2*took)
	return time.Duration(mrand.Int64N(int64(span) + 1))
}

func (c *Client) acquired(resource string, begin time.Time, attempts int, err error) {
	d := time.Since(begin)
	if err != nil {
		c.cfg.logger.Debug("redlock acquire failed", "resource", resource, "attempts", attempts, "wait", d, "err", err)
	}
	c.observe(Event{Kind: EventAcquire, Resource: resource, Duration: d, Attempts: attempts, Err: err})
}

// attempt is one Redlock round: SET NX PX (or the fencing script) on every
// node at once, decided at quorum; with a ticket, turnScript, which also
// keeps the caller's place in the nodes' waiter queue. A failed round is
// undone on every node that may hold the token, stragglers included.
func (c *Client) attempt(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig, tk *ticket) (*Lock, error) {
	token := newToken(lc.suffix)
	s, args, classify := c.roundArgs(k, token, ttl, lc, tk)
	start := time.Now()
	deadline := start.Add(c.cfg.nodeTimeout)
	r := c.broadcastLook("acquire", k.resource, c.allNodes(), c.q, deadline, false, args, s, lookOf(lc.rec))
	defer r.free()
	err := r.collect(ctx, deadline, classify)
	if err == nil && r.t.success() {
		until := start.Add(ttl - driftAllowance(ttl, c.cfg.driftFactor))
		var fence int64
		if time.Now().Before(until) {
			if lc.fencing {
				fence, err = c.settleFence(ctx, r, fencesOf(tk != nil && lc.limit <= 1), k, until, stepOf(lc))
			}
			if err == nil {
				c.leaveAnyQueue(k, tk, lc, r.notGranted())
				l := c.newLock(k, token, fence, ttl, start, until, lc)
				l.unsent, l.found, l.chainStart = r.unsent, r.rec, time.Now()
				return l, nil
			}
		} else {
			err = r.err([]error{ErrQuorum}, fmt.Sprintf("quorum reached after %v, past the validity of ttl %v", time.Since(start).Round(time.Microsecond), ttl))
		}
	}
	c.undo(k, token, r.unsent, int(lc.limit))
	if err != nil {
		return nil, err
	}
	e := r.err(r.t.causes(), fmt.Sprintf("%d of %d nodes set (quorum %d), %d held by another, %d failed",
		r.t.ok, r.t.total, c.q, r.t.refused, r.t.failed))
	// A split: some nodes ours, some another's, and nobody can hold a
	// majority. A holder with a majority is not a split (refused >= q).
	e.split = r.t.ok > 0 && r.t.refused > 0 && r.t.refused < c.q
	e.took = time.Since(start)
	return nil, e
}

// roundArgs builds an acquisition round's command: for a slot of a limited
// resource, slotWaitScript with a ticket, else slotAcquireScript; with a
// ticket, turnScript; with fencing, fenceAcquireScript; else a plain SET NX
// PX (s is nil).
func (c *Client) roundArgs(k keys, token string, ttl time.Duration, lc *lockConfig, tk *ticket) (s *script, args []any, classify func(reply) outcome) {
	ttlMs := ttl.Milliseconds()
	switch {
	case lc.limit > 1 && tk != nil:
		return slotWaitScript, c.slotWaitArgs(k, token, ttlMs, lc, tk), classifySet
	case tk != nil:
		return turnScript, c.turnArgs(k, "", token, ttl, tk, lc, false, nil), classifyTurn
	case lc.limit > 1 && lc.fencing:
		return slotAcquireScript, c.slotArgs(k, token, ttlMs, lc), classifySet
	case lc.fencing:
		return fenceAcquireScript, fenceAcquireScript.args(k.bothKeys(), token, ttlMs, c.cfg.fenceRetention.Milliseconds()), classifySet
	}
	return nil, []any{"set", k.key, token, "nx", "px", ttlMs}, classifySet
}

// undo releases a failed attempt's token on every node its SET was queued
// for (not those in unsent). Even a node that answered that another holder
// has the key gets it: a client that retries commands may have set our key
// and then seen its own retry refused, and compare-and-delete is harmless
// where the key is not ours. Nodes run calls in order, so the undo reaches
// a straggler after its SET.
func (c *Client) undo(k keys, token string, unsent uint64, limit int) {
	if limit > 1 {
		mask := c.allNodes() &^ unsent
		if mask != 0 && !c.isClosed() {
			s, args := c.slotRelease(k, token, "", slotIndex(k), limit, nil) // unannounced: an undo wakes nobody
			c.broadcast("release", k.resource, mask, bits.OnesCount64(mask), time.Now().Add(c.cfg.nodeTimeout), true, args, s).free()
		}
		return
	}
	c.unlock(k, token, c.allNodes()&^unsent)
}

// unlock sends the compare-and-delete script, without announcement, to the
// nodes in mask and does not wait for the answers.
func (c *Client) unlock(k keys, token string, mask uint64) {
	if mask == 0 || c.isClosed() {
		return
	}
	args := releaseScript.args(k.lockKeys(), token, "")
	// Nobody waits for an undo: it leaves the busy count at once.
	c.broadcast("release", k.resource, mask, bits.OnesCount64(mask), time.Now().Add(c.cfg.nodeTimeout), true, args, releaseScript).free()
}
