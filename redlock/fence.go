package redlock

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// fenceRetentionMs keeps a fence counter 7 days after its last use (WithFencing).
const fenceRetentionMs = 7 * 24 * 60 * 60 * 1000

// fenceCopies is how many nodes must carry a fence before it is issued,
// N−q+2 (docs/design/REDLOCK.md, "The fencing guarantee").
func fenceCopies(n, q int) int { return min(n, n-q+2) }

// settleFence picks the fence of a won round (turn: a queue round), the
// highest counter among the nodes that granted it, and makes sure fenceCopies
// nodes carry it before the validity ends, else ErrQuorum.
func (c *Client) settleFence(ctx context.Context, r *round, turn bool, k keys, until time.Time, step fenceStep) (int64, error) {
	copies := fenceCopies(len(c.nodes), c.q)
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	if until.Before(deadline) {
		deadline = until
	}
	classify := classifySet
	if turn {
		classify = classifyTurn
	}
	if r.t.ok < copies {
		// Decided at quorum: hear the others before raising copies they may hold.
		err := r.wait(ctx, deadline, classify, func() bool { return r.t.ok >= copies || r.pending&^r.answered == 0 })
		if err != nil {
			return 0, err
		}
	}
	fence, carry, err := highestCounter(r, turn)
	if err != nil {
		return 0, err
	}
	if f := step.atLeast(fence); f != fence {
		// Not of the slot's class: prove the next fence of the class instead.
		fence, carry = f, 0
	}
	if bits.OnesCount64(carry) >= copies {
		// No other holder can have had a quorum since: no fence went out meanwhile.
		return fence, nil
	}
	return c.raiseFence(ctx, k, fence, copies, deadline, until, step)
}

// fenceStep is the class of fences a holder may take: slot modulo n, n = 1
// for a plain lock, fenceClasses for a slot (docs/design/REDLOCK.md,
// "Limits"); lua/fence_acquire.lua bumps alike.
type fenceStep struct{ n, slot int64 }

func stepOf(lc *lockConfig) fenceStep {
	if lc.limit > 1 {
		return fenceStep{n: fenceClasses, slot: int64(lc.slot)}
	}
	return fenceStep{n: 1}
}

// atLeast is the least fence of the class >= c.
func (s fenceStep) atLeast(c int64) int64 {
	d := s.slot - c%s.n
	if d < 0 {
		d += s.n
	}
	return c + d
}

// raiseFence raises every node's counter to fence and needs copies nodes
// holding exactly it; a larger counter makes it retry above the largest.
func (c *Client) raiseFence(ctx context.Context, k keys, fence int64, copies int, deadline, until time.Time, step fenceStep) (int64, error) {
	for range maxRefences {
		args := scriptArgs(fenceRaiseScript, []string{k.fenceKey}, fence, fenceRetentionMs)
		r := c.broadcast("fence", k.resource, c.allNodes(), copies, deadline, false, args, fenceRaiseScript)
		classify := func(rep transport.Reply) outcome {
			switch v, ok := rep.Val.(int64); {
			case rep.Err != nil:
				return outFailed
			case ok && v == fence:
				return outOK
			}
			return outRefused
		}
		err := r.wait(ctx, deadline, classify, func() bool { return r.t.decided() || r.t.refused > 0 })
		switch {
		case err != nil:
			return 0, err
		case r.t.refused > 0:
			fence = step.atLeast(largestRaise(r) + 1)
			continue
		case !r.t.success():
			return 0, r.err([]error{ErrQuorum}, fmt.Sprintf(
				"fencing token stored on %d of %d nodes; a fence is issued only once %d carry it, so that it survives one node's data loss",
				r.t.ok, len(c.nodes), copies))
		case !time.Now().Before(until):
			return 0, r.err([]error{ErrQuorum}, "fencing counter settled after the validity ended")
		}
		return fence, nil
	}
	return 0, &opError{kinds: []error{ErrQuorum}, summary: fmt.Sprintf(
		"fencing token not settled: nodes kept answering larger counters %d times (a node's data loss let other holders in)", maxRefences)}
}

// maxRefences bounds raiseFence's retries: more means the counters move under it.
const maxRefences = 3

// largestRaise is the largest counter a raise round's nodes answered.
func largestRaise(r *round) int64 {
	var m int64
	for _, sl := range r.slots {
		if v, ok := sl.val.(int64); ok && sl.out == outRefused {
			m = max(m, v)
		}
	}
	return m
}

// highestCounter returns the highest counter among the nodes that granted a
// fenced round (a turn round's in turnReply), and the mask of those with it.
func highestCounter(r *round, turn bool) (int64, uint64, error) {
	var fence int64
	var carry uint64
	for i, sl := range r.slots {
		if sl.out != outOK {
			continue
		}
		v, ok := sl.val.(int64)
		if turn {
			v = turnReply(sl.val).fence
			ok = true
		}
		if !ok || v <= 0 {
			return 0, 0, r.err([]error{ErrQuorum}, fmt.Sprintf("node %d returned a bad fencing counter %v", i, sl.val))
		}
		if v > fence {
			fence, carry = v, 0
		}
		if v == fence {
			carry |= 1 << i
		}
	}
	return fence, carry, nil
}
