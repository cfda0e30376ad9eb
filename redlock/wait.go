package redlock

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// pause waits after a round failed with last, for a release announcement
// (once w watches), the retry delay, a slot handed over (park), ctx's end or
// the client's close. It returns the slot whose release woke it (-1 if none),
// or why the wait must end.
func (c *Client) pause(ctx context.Context, w *watch, t *turn, req *handoffReq, last error) (*Lock, int, error) {
	timer := time.NewTimer(c.retryDelay(last))
	defer timer.Stop()
	var wake <-chan struct{} // a nil channel is never ready
	if w != nil {
		wake = w.C
	}
	pw, handed := t.park(req)
	var perr error
	only := -1
	select {
	case <-ctx.Done():
		perr = ctx.Err()
	case <-c.closed:
		perr = ErrClosed
	case <-wake:
		only = announcedSlot(w.payload(), int(req.lc.limit))
	case <-handed:
	case <-timer.C:
	}
	if l, err := c.handed(t.unpark(ctx, pw, c.closed)); l != nil || err != nil {
		return l, -1, err
	}
	return nil, only, perr
}

// handed is a lock (if any) a holder of this client handed over: the
// caller's, or released in the background if it came as the caller gave up.
func (c *Client) handed(l *Lock, err error) (*Lock, error) {
	if l == nil {
		return nil, err
	}
	if err == nil {
		l.via = handoverLocal
		return l, nil
	}
	if !c.spawn(func() { _ = l.Release(context.Background()) }) {
		_ = l.Release(context.Background())
	}
	return nil, err
}

// retryDelay is the random delay after a round that failed with last: in
// [retryMin, retryMax] (validated: min <= max), or after a split vote a short
// one, long enough for one contender to go first (REDLOCK.md, "Split votes").
func (c *Client) retryDelay(last error) time.Duration {
	if oe := (*opError)(nil); errors.As(last, &oe) && oe.split {
		span := max(min(c.cfg.retryMin, 5*time.Millisecond), 2*oe.took)
		return time.Duration(mrand.Int64N(int64(span) + 1))
	}
	return c.cfg.retryMin + time.Duration(mrand.Int64N(int64(c.cfg.retryMax-c.cfg.retryMin)+1))
}

// park makes the caller holding the turn t of a resource of n > 1 slots
// claimable while it pauses: a slot this client releases may be handed to it
// (HANDOVER.md, "Slots"). It returns the waiter and its channel (nil if none).
func (t *turn) park(req *handoffReq) (*waiter, <-chan struct{}) {
	if t == nil || req.lc.limit <= 1 { // one holder's lock comes with the turn
		return nil, nil
	}
	w := &waiter{ready: make(chan struct{}), req: req}
	t.gs.mu.Lock()
	if g := t.gs.m[t.key]; g != nil {
		g.idle = w
	}
	t.gs.mu.Unlock()
	return w, w.ready
}

// unpark ends the pause of the parked caller w: the slot handed to it, if
// any, once a hand-over under way ends. If ctx ends or the client closes
// first: the error, with the lock if it came as the caller gave up (else the
// hand-over's sender releases what it gets).
func (t *turn) unpark(ctx context.Context, w *waiter, closed <-chan struct{}) (*Lock, error) {
	if w == nil {
		return nil, nil
	}
	gs := t.gs
	gs.mu.Lock()
	claimed := w.claimed
	if g := gs.m[t.key]; !claimed && g != nil && g.idle == w {
		g.idle = nil
	}
	gs.mu.Unlock()
	if !claimed {
		return nil, nil
	}
	var err error
	select {
	case <-w.ready:
		return w.lock, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = ErrClosed
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if w.granted {
		return w.lock, err
	}
	w.gone = true
	return nil, err
}

// announcedSlot is the slot of limit an announcement (payload) names, -1
// when it names none.
func announcedSlot(pl string, limit int) int {
	if i := strings.LastIndexByte(pl, '/'); i >= 0 {
		pl = pl[i+1:] // a reservation: queued:<head>/<slot> (slot_wait.lua)
	}
	s, err := strconv.Atoi(pl)
	if err != nil || s < 0 || s >= limit {
		return -1
	}
	return s
}
