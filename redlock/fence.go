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

// settleFence picks the fence of a won round, the highest counter among the
// nodes that granted it, and makes sure fenceCopies nodes carry it before
// the validity ends, else ErrQuorum (a later fence could go backwards).
// turn says the round was a turn (queue) round; step which fences the
// holder may take (a slot's class).
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
		// The round was decided at quorum: hear the nodes still answering
		// before paying a round trip for copies they may already hold.
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
		// Not of the slot's class (a node answered another script's
		// counter): prove the next fence of the class instead.
		fence, carry = f, 0
	}
	if bits.OnesCount64(carry) >= copies {
		// So many nodes set this round's key that no other holder can
		// have had a quorum since: no fence was handed out meanwhile.
		return fence, nil
	}
	return c.raiseFence(ctx, k, fence, copies, deadline, until, step)
}

// fenceStep is the class of fences a holder may take: slot modulo n, n = 1
// for a plain lock, fenceClasses for a slot (docs/design/REDLOCK.md,
// "Limits"); lua/fence_acquire.lua bumps alike.
type fenceStep struct{ n, slot int64 }

// stepOf is the fence class of an acquisition configured by lc.
func stepOf(lc *lockConfig) fenceStep {
	if lc.limit > 1 {
		return fenceStep{n: fenceClasses, slot: int64(lc.slot)}
	}
	return fenceStep{n: 1}
}

// atLeast is the least fence of the class that is at least c.
func (s fenceStep) atLeast(c int64) int64 {
	d := s.slot - c%s.n
	if d < 0 {
		d += s.n
	}
	return c + d
}

// raiseFence proves fence before it is handed out: it raises every node's
// counter to it and needs copies nodes holding exactly it; a larger counter
// makes it fence again above the largest, at most maxRefences times.
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

// maxRefences bounds raiseFence's retries: once covers a lost node's other
// holder or this round's unheard bump; more means the counters move under it.
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
// fenced round, and the mask of those that returned it: a fenced SET
// answers with the counter, a turn round with it in its reply (turnReply).
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
