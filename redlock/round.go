package redlock

import (
	"context"
	"time"
)

// drainBound bounds how long a round's stragglers are waited for after the
// round was decided. Workers always answer (at the latest when the client's
// own timeouts fire), so this only guards against a misconfigured client.
const drainBound = time.Minute

// round is one operation sent to several nodes at once.
type round struct {
	c        *Client
	op       string
	resource string
	replies  chan reply
	sent     uint64 // nodes the round was sent to
	pending  uint64 // nodes whose reply has not been read yet
	answered uint64 // nodes counted in the tally (reply read, or timed out)
	vals     []any
	outs     []outcome
	errs     []error
	t        tally
}

// broadcast sends args (or a per-node variant) to the nodes in mask, each call
// bounded by deadline, and returns the round to collect. need is the number of
// OK answers that decides success.
func (c *Client) broadcast(op, resource string, mask uint64, need int, deadline time.Time, args func(i int) ([]any, *script)) *round {
	n := len(c.nodes)
	r := &round{
		c: c, op: op, resource: resource,
		replies: make(chan reply, n),
		sent:    mask, pending: mask,
		vals: make([]any, n),
		outs: make([]outcome, n),
		errs: make([]error, n),
		t:    tally{need: need},
	}
	for i := range c.nodes {
		if mask&(1<<i) == 0 {
			continue
		}
		r.t.total++
		a, s := args(i)
		c.nodes[i].send(&call{node: i, args: a, script: s, deadline: deadline, out: r.replies}, c.closed)
	}
	return r
}

// allNodes is the mask of every node.
func (c *Client) allNodes() uint64 {
	if len(c.nodes) == 64 {
		return ^uint64(0)
	}
	return 1<<len(c.nodes) - 1
}

// collect reads replies until the round is decided, the deadline passes
// (pending nodes then count as failed) or ctx ends. classify turns a reply
// into an outcome. It reports ctx's error if ctx ended first.
func (r *round) collect(ctx context.Context, deadline time.Time, classify func(reply) outcome) error {
	if r.t.decided() {
		return nil
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for !r.t.decided() {
		select {
		case rep := <-r.replies:
			r.record(rep, classify(rep))
		case <-timer.C:
			r.timeoutPending()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *round) record(rep reply, o outcome) {
	bit := uint64(1) << rep.node
	r.pending &^= bit
	if r.answered&bit != 0 {
		return // already counted as timed out
	}
	r.answered |= bit
	r.vals[rep.node] = rep.val
	r.outs[rep.node] = o
	if o == outFailed && rep.err != nil {
		r.errs[rep.node] = rep.err
		r.c.nodeFailed(r.op, r.resource, rep.node, rep.err)
	}
	r.t.add(o)
}

// timeoutPending counts every node that has not answered as failed.
func (r *round) timeoutPending() {
	for i := range r.c.nodes {
		bit := uint64(1) << i
		if r.pending&bit == 0 || r.answered&bit != 0 {
			continue
		}
		r.answered |= bit
		r.outs[i] = outFailed
		r.errs[i] = errNodeTimeout
		r.c.nodeFailed(r.op, r.resource, i, errNodeTimeout)
		r.t.add(outFailed)
	}
}

// okMask is the set of nodes that answered OK.
func (r *round) okMask() uint64 {
	var m uint64
	for i, o := range r.outs {
		if o == outOK {
			m |= 1 << i
		}
	}
	return m
}

// err builds the error of a round that did not succeed.
func (r *round) err(kinds []error, summary string) error {
	e := &opError{kinds: kinds, summary: summary}
	for i, err := range r.errs {
		if err != nil {
			e.nodes = append(e.nodes, &NodeError{Node: i, Addr: r.c.nodes[i].addr, Op: r.op, Err: err})
		}
	}
	return e
}

// finish hands the replies not read yet to late, in the background; late is
// called once per straggler, in no particular order.
func (r *round) finish(late func(rep reply)) {
	if r.pending == 0 {
		return
	}
	r.c.spawn(func() {
		timer := time.NewTimer(drainBound)
		defer timer.Stop()
		for r.pending != 0 {
			select {
			case rep := <-r.replies:
				r.pending &^= 1 << rep.node
				if late != nil {
					late(rep)
				}
			case <-timer.C:
				return
			case <-r.c.closed:
				return
			}
		}
	})
}

func (c *Client) nodeFailed(op, resource string, i int, err error) {
	n := c.nodes[i]
	c.cfg.logger.Debug("redlock node call failed", "op", op, "resource", resource, "node", i, "addr", n.addr, "err", err)
	c.observe(Event{Kind: EventNodeError, Resource: resource, Node: i, Addr: n.addr, Err: err})
}
