package redlock

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// fenceCopies is how many nodes must carry a fence before it is issued:
// enough that, once any one node has lost its data, every quorum still
// overlaps a node that carries it (copies − 1 + quorum > N). That is N−q+2
// nodes: one more than a quorum for an odd N (all 3 of 3, 4 of 5), a quorum
// for an even one. See WithFencing for what it costs.
func fenceCopies(n, q int) int { return min(n, n-q+2) }

// settleFence picks the fence of a won round, the highest counter among the
// nodes that granted it, and makes sure fenceCopies nodes carry it before
// the validity ends: then any later acquisition's quorum overlaps a node
// whose counter is at least this fence, even after one node lost its
// counters, and so gets a larger one. A fence that cannot be stored that
// widely is refused (ErrQuorum): handing it out could let a later fence go
// backwards. step says which fences the holder may take (a slot's class).
func (c *Client) settleFence(ctx context.Context, r *round, rd fenceReader, k keys, until time.Time, step fenceStep) (int64, error) {
	copies := fenceCopies(len(c.nodes), c.q)
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	if until.Before(deadline) {
		deadline = until
	}
	if r.t.ok < copies {
		// The round was decided at quorum: hear the nodes still answering
		// before paying a round trip for copies they may already hold.
		err := r.wait(ctx, deadline, rd.classify, func() bool { return r.t.ok >= copies || r.pending&^r.answered == 0 })
		if err != nil {
			return 0, err
		}
	}
	fence, carry, err := highestCounter(r, rd.counter)
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

// fenceStep is the class of fences a holder may take: every fence for a
// plain lock; for slot s of a limit n > 1, those equal to s modulo
// fenceClasses (whatever n: callers of two limits may share the slots), so
// that holders of different slots, whose rounds may overlap in time, never
// get the same fence (docs/design/REDLOCK.md, "Limits"). lua/slot_acquire.lua
// bumps the counters alike.
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
	if s.n <= 1 {
		return c
	}
	d := s.slot - c%s.n
	if d < 0 {
		d += s.n
	}
	return c + d
}

// above is the least fence of the class that is larger than c.
func (s fenceStep) above(c int64) int64 { return s.atLeast(c + 1) }

// raiseFence proves fence against what the nodes hold now, before it is
// handed out: it raises every node's counter to it and needs copies nodes
// to answer that they hold exactly it. An answer read in the won round does
// not count, since that node may have lost its data since and let another
// holder in. A node that holds a larger counter (another holder's fence
// after such a loss, or this round's own bump on a node not heard in time)
// makes it fence again, above the largest counter seen (the least fence
// of step's class above it), at most
// maxRefences times: the copies of any fence handed out before that survive
// overlap every copies nodes, so a fence proven this way is larger than
// each of them. It returns the fence proven.
func (c *Client) raiseFence(ctx context.Context, k keys, fence int64, copies int, deadline, until time.Time, step fenceStep) (int64, error) {
	for range maxRefences {
		args := scriptArgs(fenceRaiseScript, []string{k.fenceKey}, fence, c.cfg.fenceRetention.Milliseconds())
		r := c.broadcast("fence", k.resource, c.allNodes(), copies, deadline, false, args, fenceRaiseScript)
		classify := func(rep transport.Reply) outcome { return classifyRaise(rep, fence) }
		err := r.wait(ctx, deadline, classify, func() bool { return r.t.decided() || r.t.refused > 0 })
		switch {
		case err != nil:
			return 0, err
		case r.t.refused > 0:
			fence = step.above(largestRaise(r))
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

// maxRefences bounds how often raiseFence fences again above a larger
// counter: once covers a lost node's other holder or this round's unheard
// bump; more means the counters move under it.
const maxRefences = 3

// classifyRaise counts a node that holds exactly fence as OK, one that holds
// a larger counter as refused.
func classifyRaise(rep transport.Reply, fence int64) outcome {
	if rep.Err != nil {
		return outFailed
	}
	if v, ok := rep.Val.(int64); ok && v == fence {
		return outOK
	}
	return outRefused
}

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
// fenced round, and the mask of those that returned it.
func highestCounter(r *round, counter func(any) any) (int64, uint64, error) {
	var fence int64
	for i, sl := range r.slots {
		if sl.out != outOK {
			continue
		}
		v, ok := counter(sl.val).(int64)
		if !ok || v <= 0 {
			return 0, 0, r.err([]error{ErrQuorum}, fmt.Sprintf("node %d returned a bad fencing counter %v", i, sl.val))
		}
		fence = max(fence, v)
	}
	var carry uint64
	for i, sl := range r.slots {
		if v, ok := counter(sl.val).(int64); ok && sl.out == outOK && v == fence {
			carry |= 1 << i
		}
	}
	return fence, carry, nil
}

// fenceReader says how a won round's replies carry fencing counters: a
// fenced SET answers with the counter, a turn (queue) round with a triple
// whose last element is the counter.
type fenceReader struct {
	classify func(transport.Reply) outcome
	counter  func(any) any
}

var (
	setFences  = fenceReader{classifySet, func(v any) any { return v }}
	turnFences = fenceReader{classifyTurn, func(v any) any { _, _, f := turnReply(v); return f }}
)

// fencesOf picks the reader for a round sent with or without a ticket.
func fencesOf(turn bool) fenceReader {
	if turn {
		return turnFences
	}
	return setFences
}
