package redlock

import (
	"context"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// round is one operation sent to several nodes at once; replies after its
// decision are dropped (a later release or undo reaches a node after it).
type round struct {
	c        *Client
	op       string
	resource string
	in       []transport.Reply // each node's reply, valid once its bit is in arrived
	arrived  atomic.Uint64     // nodes whose reply is in in
	wake     chan struct{}     // a token once wakeAt replies or more are in
	wakeAt   int               // the fewest replies that can decide the round
	pending  uint64            // nodes called: those not answered are pending
	answered uint64            // nodes counted in the tally (reply read, or timed out)
	unsent   uint64            // nodes whose call was refused before it was queued
	slots    []slot
	calls    []transport.Call // room for one call per node
	t        tally
	rec      recordSeen   // what the calls' look-ups found (completion.go)
	busy     bool         // counted in the client's busy until its caller stops waiting
	deadline time.Time    // the calls' deadline, collect's
	refs     atomic.Int32 // the caller until free, each queued call until it replied
}

// slot is what one node answered in a round.
type slot struct {
	val any
	out outcome
	err error
}

// broadcast sends one command to the nodes in mask (need OK answers decide
// it); a cleanup round is sent even past the deadline.
func (c *Client) broadcast(op, resource string, mask uint64, need int, deadline time.Time, cleanup bool, args []any, s *transport.Script) *round {
	return c.broadcastLook(op, resource, mask, need, deadline, cleanup, args, s, nil)
}

// broadcastLook is broadcast with a look-up (lookOf) sent after each call.
func (c *Client) broadcastLook(op, resource string, mask uint64, need int, deadline time.Time, cleanup bool, args []any, s *transport.Script, look []any) *round {
	r, ok := c.rounds.Get().(*round)
	if !ok {
		n := len(c.nodes)
		r = &round{c: c, in: make([]transport.Reply, n), wake: make(chan struct{}, 1), slots: make([]slot, n), calls: make([]transport.Call, n)}
	}
	r.op, r.resource, r.pending, r.busy, r.deadline = op, resource, mask, true, deadline
	c.busy.Add(1) // before its calls queue: Node.gather sees every caller counted
	calls := r.calls[:bits.OnesCount64(mask)]
	r.t = tally{need: need, total: len(calls)}
	r.refs.Store(int32(1 + len(calls)))
	r.wakeAt = min(need, len(calls)-need+1)
	for j, in := 0, mask; in != 0; j, in = j+1, in&(in-1) {
		i := bits.TrailingZeros64(in)
		calls[j] = transport.Call{Node: i, Args: args, Script: s, Deadline: deadline, Cleanup: cleanup, Owner: r, Op: op, Resource: resource, Look: look}
		if !c.nodes[i].Send(&calls[j], c.closed) {
			r.unsent |= 1 << i
		}
	}
	return r
}

// free lets the round go: queued calls still keep it.
func (r *round) free() {
	r.idle()
	r.Unref()
}

// Arrive stores a node's reply, waking the caller once they can decide.
func (r *round) Arrive(rep transport.Reply) {
	r.in[rep.Node] = rep
	if bits.OnesCount64(r.arrived.Or(1<<rep.Node)|1<<rep.Node) < r.wakeAt {
		return
	}
	select {
	case r.wake <- struct{}{}: // kept until wait (or Unref) takes it
	default: // a token is already waiting
	}
}

// Unref drops one reference; the last one empties the round and pools it.
func (r *round) Unref() {
	if r.refs.Add(-1) != 0 {
		return
	}
	select {
	case <-r.wake:
	default:
	}
	r.arrived.Store(0)
	clear(r.in)
	clear(r.slots)
	clear(r.calls)
	r.answered, r.unsent, r.rec = 0, 0, recordSeen{}
	r.c.rounds.Put(r)
}

// idle ends the round's count in the client's busy callers.
func (r *round) idle() {
	if r.busy {
		r.busy = false
		r.c.busy.Add(-1)
	}
}

func (c *Client) allNodes() uint64 {
	return 1<<len(c.nodes) - 1 // a shift by 64 is 0: every bit for 64 nodes
}

// collect reads replies until the round is decided, the calls' deadline
// passes (pending nodes then count as failed) or ctx ends (its error).
func (r *round) collect(ctx context.Context, classify func(transport.Reply) outcome) error {
	return r.wait(ctx, r.deadline, classify, r.t.decided)
}

// collectAll is collect waiting for every node's answer.
func (r *round) collectAll(ctx context.Context, deadline time.Time, classify func(transport.Reply) outcome) error {
	return r.wait(ctx, deadline, classify, func() bool { return r.pending&^r.answered == 0 })
}

func (r *round) wait(ctx context.Context, deadline time.Time, classify func(transport.Reply) outcome, done func() bool) error {
	defer r.idle()
	if r.take(classify); done() {
		return nil
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop() // outside any loop: no heap-allocated defer
	for {
		select {
		case <-r.wake:
		case <-timer.C:
			r.take(classify)
			r.timeoutPending()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.take(classify); done() {
			return nil
		}
	}
}

// take records the replies that arrived since, but not of timed-out nodes.
func (r *round) take(classify func(transport.Reply) outcome) {
	for in := r.arrived.Load() & r.pending &^ r.answered; in != 0; in &= in - 1 {
		i := bits.TrailingZeros64(in)
		rep := r.in[i]
		o := classify(rep)
		r.answered |= 1 << i
		r.slots[i] = slot{val: rep.Val, out: o}
		if o == outFailed {
			r.slots[i].err = rep.Err // reported by the node's worker
		}
		r.rec.add(seenOf(rep.Seen))
		r.t.add(o)
	}
}

func (r *round) timeoutPending() {
	for in := r.pending &^ r.answered; in != 0; in &= in - 1 {
		i := bits.TrailingZeros64(in)
		r.answered |= 1 << i
		r.slots[i] = slot{out: outFailed, err: transport.ErrNodeTimeout}
		r.c.nodeFailed(r.op, r.resource, i, transport.ErrNodeTimeout)
		r.t.add(outFailed)
	}
}

func (r *round) err(kinds []error, summary string) *opError {
	e := &opError{kinds: kinds, summary: summary}
	for i, sl := range r.slots {
		if sl.err != nil {
			e.nodes = append(e.nodes, &NodeError{Node: i, Addr: r.c.nodes[i].Addr, Op: r.op, Err: sl.err})
		}
	}
	return e
}

func (c *Client) nodeFailed(op, resource string, i int, err error) {
	n := c.nodes[i]
	c.cfg.logger.Debug("redlock node call failed", "op", op, "resource", resource, "node", i, "addr", n.Addr, "err", err)
	c.observe(Event{Kind: EventNodeError, Resource: resource, Node: i, Addr: n.Addr, Err: err})
}

// outcome classifies one node's answer in a round.
type outcome uint8

const (
	outPending outcome = iota
	outOK              // the node did what was asked (set, extended, released)
	outRefused         // the node answered no (key held by another / not ours)
	outFailed          // error or timeout: we do not know what the node did
)

func classifyAnswered(rep transport.Reply) outcome {
	if rep.Err != nil {
		return outFailed
	}
	return outOK
}

// classifySet is for SET NX and the fencing acquire script (nil: held).
func classifySet(rep transport.Reply) outcome {
	if rep.Err == redis.Nil {
		return outRefused
	}
	return classifyAnswered(rep)
}

// classifyOne is for scripts answering 1 (done) or 0 (not our key).
func classifyOne(rep transport.Reply) outcome {
	if n, _ := rep.Val.(int64); rep.Err == nil && n != 1 {
		return outRefused
	}
	return classifyAnswered(rep)
}

// tally counts a round's outcomes: decided at need successes, or once too
// few nodes are left to reach need.
type tally struct {
	total, need         int
	ok, refused, failed int
}

func (t *tally) add(o outcome) {
	switch o {
	case outOK:
		t.ok++
	case outRefused:
		t.refused++
	case outFailed:
		t.failed++
	}
}

func (t *tally) decided() bool {
	return t.ok >= t.need || t.total-t.refused-t.failed < t.need
}

func (t *tally) success() bool { return t.ok >= t.need }

// causes are the sentinels of a round that did not succeed, by what left too
// few nodes (REDLOCK.md, "Distinguishable errors").
func (t *tally) causes() []error {
	switch {
	case t.total-t.failed < t.need: // by failures alone
		return []error{ErrQuorum}
	case t.total-t.refused < t.need: // by refusals alone
		return []error{ErrLocked}
	}
	return []error{ErrLocked, ErrQuorum}
}

func quorum(n int) int { return n/2 + 1 }

// driftAllowance is the margin of a TTL's validity: ttl·driftFactor + 2ms.
func driftAllowance(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + driftFloor
}
