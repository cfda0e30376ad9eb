package redlock

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"
)

// try makes one Redlock round (attempt) for a resource of one holder. For
// one of n > 1 slots it makes one round per slot, from a random slot on
// (from slot 0 for a queued waiter, tk not nil: slot_wait.lua), until one
// is won; or, with only >= 0, one round for that slot. When all are refused
// it returns an error that matches the causes of every slot's failure
// (ErrLocked when all are held).
func (c *Client) try(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig, only int, tk *ticket) (*Lock, error) {
	n, start, tries := int(lc.limit), only, 1
	switch {
	case n <= 1:
		return c.attempt(ctx, k, ttl, lc, tk)
	case only >= 0:
	case tk != nil:
		start, tries = 0, n
	default:
		start, tries = mrand.IntN(n), n // spreads uncontended callers over the slots
	}
	all := &opError{summary: fmt.Sprintf("none of the %d slots could be taken", tries)}
	for i := range tries {
		slot, sk := (start+i)%n, k
		sk.key = slotKey(k.key, slot)
		lc.slot = uint16(slot)
		l, err := c.attempt(ctx, sk, ttl, lc, tk)
		if err == nil {
			if c.cfg.localQueue {
				// Its release may hand the slot to this client's next
				// caller (docs/design/HANDOVER.md).
				l.adoptTurn(&turn{gs: &c.gates, key: gateKey(k, lc.limit), slots: true})
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
		oe = &opError{kinds: []error{ErrQuorum}, nodes: e.nodes}
	}
	for _, k := range oe.kinds {
		if !slices.Contains(e.kinds, k) {
			e.kinds = append(e.kinds, k)
		}
	}
	e.nodes = oe.nodes
	e.split = e.split || oe.split
	e.took = max(e.took, oe.took)
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
				c.dequeue(k, tk, lc, r.notSet()) // where it was not granted the key
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

// dequeue takes waiter tk out of the nodes' queue of k's resource (its
// slots' queue under WithLimit) on the nodes in mask.
func (c *Client) dequeue(k keys, tk *ticket, lc *lockConfig, mask uint64) {
	if lc.limit > 1 {
		c.leaveSlotQueue(k, tk, int(lc.limit), mask)
	} else {
		c.leaveQueue(k, tk, mask)
	}
}
