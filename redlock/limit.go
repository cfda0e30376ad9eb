package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// A resource locked WithLimit(n), n > 1, has n slots, each a Redlock lock
// of its own: slot 0 is the resource's own lock key, slot i > 0 a key beside
// it under the same hash tag, so a slot is as safe and as fault tolerant as
// a plain lock, and a caller of n takes only slots below n
// (docs/design/REDLOCK.md, "Limits").

// MaxLimit is the largest n WithLimit accepts: a TryAcquire of a full
// resource makes one round per slot.
const MaxLimit = 1024

// fenceClasses is the modulus of a slot's fence class: slot s takes fences
// equal to s modulo fenceClasses, whatever n, so that holders of different
// slots never share a fence, also while callers of two limits share the
// slots (docs/design/REDLOCK.md, "Limits").
const fenceClasses = MaxLimit

// WithLimit lets up to n holders have the resource at once: each holds one
// of n slots (Lock.Slot), and each slot is a quorum lock of its own, with the
// safety and fault tolerance of a single lock. TryAcquire fails with
// ErrLocked when all n are held; Acquire waits for whichever slot frees
// first, woken by the release of any. Fences (WithFencing) come from one
// counter per resource: no two holders of the resource share one, and each
// is larger than every fence handed out before its acquisition began,
// whatever their slots (holders of slot s take fences equal to s modulo
// MaxLimit; docs/design/REDLOCK.md, "Limits"). Callers may give one resource
// different n, as while a change of n rolls out: slot 0 is the plain lock's
// key and slot i one lock whatever n, and a caller of n takes only slots
// below n, so at most the largest n in use hold it at once, and nobody is
// refused for the difference (docs/design/REDLOCK.md, "Changing n"). n must
// be in [1, MaxLimit]; WithLimit(1) is the default, one holder. Waiters of a
// resource of n > 1 slots queue in FIFO order in their process, and a slot
// released by their Client is handed to the first of them in one round;
// waiters of different processes queue on the nodes in one queue per
// resource shared by its slots, and a slot released while they wait is
// reserved for the earliest (docs/design/HANDOVER.md).
func WithLimit(n int) LockOption {
	return func(c *lockConfig) { c.limit, c.limited = int32(max(min(n, MaxLimit+1), math.MinInt32)), true }
}

// Slot returns which of the resource's n slots the lock holds, in [0, n),
// when it was acquired WithLimit(n); 0 otherwise, and for a nil Lock.
func (l *Lock) Slot() int {
	if l == nil {
		return 0
	}
	return int(l.slot)
}

// checkLimit validates WithLimit's n.
func checkLimit(lc *lockConfig) error {
	switch {
	case !lc.limited:
	case lc.limit < 1:
		return invalidf("limit must be at least 1, got %d", lc.limit)
	case lc.limit > MaxLimit:
		return invalidf("limit must be at most %d", MaxLimit)
	}
	return nil
}

// baseKey is the resource's own lock key, slot 0's: the fencing
// counter's key without its suffix.
func (k keys) baseKey() string { return strings.TrimSuffix(k.fenceKey, fenceSuffix) }

// slotKeys are the keys of slot i of resource: the slot's lock key (the
// resource's own for slot 0, beside it under the same hash tag otherwise),
// the resource's fencing counter and release channel, shared by the slots.
func (c *Client) slotKeys(resource string, i int) keys {
	k := c.keysFor(resource)
	k.key = slotKey(k.key, i)
	return k
}

func slotKey(lockKey string, i int) string {
	if i == 0 {
		return lockKey
	}
	return lockKey + slotSuffix + strconv.Itoa(i)
}

// slotSuffix follows the resource's lock key in a slot's key (slot 0 has
// none).
const slotSuffix = ":slot:"

// slotArgs builds slotAcquireScript's arguments (a fenced slot round).
func (c *Client) slotArgs(k keys, token string, ttlMs int64, lc *lockConfig) []any {
	return slotAcquireScript.args(k.bothKeys(), token, ttlMs, c.cfg.fenceRetention.Milliseconds(), fenceClasses, lc.slot)
}

// slotQueueKeys are the keys of slot_queue.lua for a resource of limit
// slots, k being one slot's keys: the resource's lock key, its waiter queue
// (the same keys as a plain lock's queue), the fencing counter, then every
// slot key.
func (k keys) slotQueueKeys(limit int) []string {
	base := k.baseKey()
	names := make([]string, 4, 4+limit)
	names[0], names[1], names[2], names[3] = base, base+":q", base+":qx", k.fenceKey
	for i := range limit {
		names = append(names, slotKey(base, i))
	}
	return names
}

// slotIndex is the number of the slot whose keys are k.
func slotIndex(k keys) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(k.key, k.baseKey()+slotSuffix))
	return i
}

// slotRelease builds the release of slot key k (slot of limit) for token:
// deleted, or reserved for the resource's waiter queue when it is not
// empty, and then announced on channel (none when empty).
func (c *Client) slotRelease(k keys, token, channel string, slot, limit int, rec *completionRecord) (*script, []any) {
	return slotReleaseScript, recordedArgs(slotReleaseScript, k.slotQueueKeys(limit), rec, token, strconv.Itoa(slot), limit,
		c.queueLease().Milliseconds(), channel)
}

// slotWaitArgs builds slotWaitScript's arguments: a queued waiter's round
// on slot lc.slot with ticket tk.
func (c *Client) slotWaitArgs(k keys, token string, ttlMs int64, lc *lockConfig, tk *ticket) []any {
	return slotWaitScript.args(k.slotQueueKeys(int(lc.limit)), token, ttlMs, c.cfg.fenceRetention.Milliseconds(),
		lc.limit, flag(lc.fencing), fenceClasses, lc.slot, tk.score, tk.id, c.queueLease().Milliseconds(), k.channel)
}

// leaveSlotQueue takes waiter tk out of the queue of slots on the nodes in
// mask, without waiting for the answers.
func (c *Client) leaveSlotQueue(k keys, tk *ticket, limit int, mask uint64) {
	if mask == 0 || tk == nil || c.isClosed() {
		return
	}
	args := slotLeaveScript.args(k.slotQueueKeys(limit), tk.id, limit, k.channel)
	c.broadcast("dequeue", k.resource, mask, 1, time.Now().Add(c.cfg.nodeTimeout), true, args, slotLeaveScript).free()
}

// trySlots makes one round per slot of a limited resource, from a random
// slot on (from slot 0 for a queued waiter, tk not nil: slot_wait.lua),
// until one is won; or, with only >= 0, one round for that slot. When all
// are refused it returns an error that matches the causes of every slot's
// failure (ErrLocked when all are held).
func (c *Client) trySlots(ctx context.Context, resource string, ttl time.Duration, lc *lockConfig, only int, tk *ticket) (*Lock, error) {
	n, start, tries := int(lc.limit), only, 1
	switch {
	case only >= 0:
	case tk != nil:
		start, tries = 0, n
	default:
		start, tries = mrand.IntN(n), n // spreads uncontended callers over the slots
	}
	all := &opError{summary: fmt.Sprintf("none of the %d slots could be taken", tries)}
	for i := range tries {
		slot := (start + i) % n
		lc.slot = uint16(slot)
		l, err := c.attempt(ctx, c.slotKeys(resource, slot), ttl, lc, tk)
		if err == nil {
			if c.cfg.localQueue {
				// Its release may hand the slot to this client's next
				// caller (docs/design/HANDOVER.md).
				l.adoptTurn(&turn{gs: &c.gates, key: gateKey(c.keysFor(resource), lc.limit), slots: true})
			}
			return l, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return nil, err
		}
		all.add(err)
	}
	return nil, all
}

// add merges a slot's failure into e: its causes, its node errors (the
// last slot's), and whether it was a split.
func (e *opError) add(err error) {
	var oe *opError
	if !errors.As(err, &oe) {
		e.kinds = appendNew(e.kinds, ErrQuorum)
		return
	}
	for _, k := range oe.kinds {
		e.kinds = appendNew(e.kinds, k)
	}
	e.nodes = oe.nodes
	e.split = e.split || oe.split
	e.took = max(e.took, oe.took)
}

func appendNew(errs []error, e error) []error {
	for _, x := range errs {
		if x == e {
			return errs
		}
	}
	return append(errs, e)
}

// acquireLimited is Acquire for a resource of n > 1 slots. As for one
// holder, only the first of this client's callers (in FIFO order) tries the
// nodes, so that a release sets one caller per process on the freed slot,
// not all of them; once it holds a slot, the next caller tries the others.
// A slot this client releases goes to the first of its callers in one round
// (slot_turn.lua): to the one trying the nodes while it pauses between its
// rounds (pauseParked), else to the first queued behind it (enterSlots).
// The trying caller's first round is plain (slot_acquire.lua, as
// TryAcquire's) unless the resource was contended here lately; after a
// refusal it queues on the nodes with ticket tk, taken on arrival, in the
// resource's queue shared by the slots (slot_wait.lua), and leaves it when
// it wins or gives up. It is woken by a release that reserves a slot for
// it (then it tries that slot alone) or by the retry delay (then it tries
// all slots).
func (c *Client) acquireLimited(ctx context.Context, resource string, ttl time.Duration, lc *lockConfig) (*Lock, int, error) {
	tk := newTicket()
	req := c.waitReq(c.keysFor(resource), ttl, lc, nil)
	t, l, err := c.enterSlots(ctx, resource, lc, req)
	switch {
	case err != nil:
		return nil, 0, err
	case l != nil:
		return l, 1, nil // handed over by a holder of this client
	}
	p := pauser{c: c}
	defer p.stop()
	var last error
	var queued *ticket // nil until the first round failed: nothing to leave on the nodes
	if ch := c.keysFor(resource).channel; c.notify.watched(ch) && c.slotTicket(tk) != nil {
		// Contended here lately: queue and watch from the first round, as
		// attemptLoop does.
		p.w = c.notify.watch(ctx, ch)
		p.w.forWaiter(tk.id)
		queued = tk
	}
	only := -1
	for attempts := 1; ; attempts++ {
		p.reset()
		if c.cfg.slotRound != nil {
			c.cfg.slotRound()
		}
		l, err := c.trySlots(ctx, resource, ttl, lc, only, c.slotTicket(queued))
		if err == nil {
			t.leave() // the next caller of this client tries the other slots
			return l, attempts, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			c.leaveSlots(resource, queued, lc, t)
			return nil, attempts, waitError(ctx, err, last)
		}
		queued, last = tk, err
		if p.w == nil && errors.Is(err, ErrLocked) {
			p.w = c.notify.watch(ctx, c.keysFor(resource).channel)
			p.w.forWaiter(tk.id) // a reservation is announced to the queue's head
			continue             // a slot may have been released before the watch
		}
		l, err = c.pauseParked(ctx, &p, t, req, err)
		if l != nil || err != nil {
			c.leaveSlots(resource, queued, lc, t)
		}
		if l != nil {
			l.via = handoverLocal
			return l, attempts, nil
		}
		if err != nil {
			return nil, attempts, waitError(ctx, err, last)
		}
		only = announcedSlot(&p, int(lc.limit))
	}
}

// enterSlots queues the caller behind this client's other callers of the
// resource until it holds the turn t, or is handed a slot released by this
// client (a slot does not keep the turn: it comes alone, with no turn).
func (c *Client) enterSlots(ctx context.Context, resource string, lc *lockConfig, req *handoffReq) (*turn, *Lock, error) {
	if !c.cfg.localQueue {
		return nil, nil, nil
	}
	t, l, err := c.gates.enter(ctx, gateKey(c.keysFor(resource), lc.limit), c.closed, req)
	if l != nil {
		if err == nil {
			l.via = handoverLocal
			return nil, l, nil
		}
		// It arrived as the caller gave up.
		if !c.spawn(func() { _ = l.Release(context.Background()) }) {
			_ = l.Release(context.Background())
		}
	}
	switch {
	case err == nil:
		return t, nil, nil
	case errors.Is(err, ErrClosed):
		return nil, nil, err
	}
	return nil, nil, waitError(ctx, nil, &opError{kinds: []error{ErrLocked}, summary: "waited behind other callers of this client"})
}

// slotTicket is the ticket a waiter's slot rounds queue with: none when the
// queue of slots is turned off (a test's control).
func (c *Client) slotTicket(tk *ticket) *ticket {
	if c.cfg.noSlotQueue {
		return nil
	}
	return tk
}

// leaveSlots ends a waiter's wait for a slot: it leaves the nodes' queue
// (if it queued) and passes its local turn t on.
func (c *Client) leaveSlots(resource string, tk *ticket, lc *lockConfig, t *turn) {
	if tk = c.slotTicket(tk); tk != nil {
		c.leaveSlotQueue(c.slotKeys(resource, 0), tk, int(lc.limit), c.allNodes())
	}
	t.leave()
}

// gateKey names the local queue of a resource's callers with limit n.
func gateKey(base keys, n int32) string { return base.key + "#" + strconv.Itoa(int(n)) }

// pauseParked is acquireLimited's pause after a failed try (last), with
// the caller parked on its turn t (see park): a slot this client releases
// meanwhile is handed to it, and comes back. It returns ctx's error or
// ErrClosed when the wait must end instead.
func (c *Client) pauseParked(ctx context.Context, p *pauser, t *turn, req *handoffReq, last error) (*Lock, error) {
	w := t.park(req)
	var handed <-chan struct{}
	if w != nil {
		handed = w.ready
	}
	perr := p.pauseOr(ctx, last, handed)
	l, err := t.unpark(ctx, w, c.closed)
	switch {
	case l != nil && err == nil:
		return l, nil
	case l != nil:
		// It arrived as the caller gave up.
		if !c.spawn(func() { _ = l.Release(context.Background()) }) {
			_ = l.Release(context.Background())
		}
		return nil, err
	case err != nil:
		return nil, err
	}
	return nil, perr
}

// pauseOr is pause that also ends when handed is closed (nil: never, as a
// nil channel is never ready).
func (p *pauser) pauseOr(ctx context.Context, err error, handed <-chan struct{}) error {
	d := p.c.delayAfter(err)
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	var wake <-chan struct{}
	if p.w != nil {
		wake = p.w.C
	}
	p.woke = false
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.c.closed:
		return ErrClosed
	case <-wake:
		p.woke = true
	case <-handed:
	case <-p.timer.C:
	}
	return nil
}

// announcedSlot is the slot whose release woke the pause, -1 when the pause
// ended otherwise (or the announcement names no slot of limit).
func announcedSlot(p *pauser, limit int) int {
	if !p.woke || p.w == nil {
		return -1
	}
	pl := p.w.payload()
	if i := strings.LastIndexByte(pl, '/'); i >= 0 {
		pl = pl[i+1:] // a reservation: queued:<head>/<slot> (slot_queue.lua)
	}
	s, err := strconv.Atoi(pl)
	if err != nil || s < 0 || s >= limit {
		return -1
	}
	return s
}
