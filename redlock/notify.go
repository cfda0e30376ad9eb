package redlock

import (
	"context"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriptionLinger is how long a release channel stays subscribed after its
// last waiter left, so that a hot resource is not resubscribed at each turn.
const subscriptionLinger = 2 * time.Second

// notifier wakes Acquire waiters on releases, over one pub/sub connection
// per node; a release channel is subscribed while someone waits for it.
type notifier struct {
	c          *Client
	mu         sync.Mutex
	subs       map[string]*subscription
	ps         []*redis.PubSub // per node, created on first use
	wg         sync.WaitGroup  // the dispatchers, and the closers at close
	closed     bool
	subscribed atomic.Int32 // len(subs), for watched's fast path
}

type subscription struct {
	watches map[*watch]struct{}
	linger  *time.Timer
	closing bool // an unsubscription is being sent
}

// watch is one waiter's interest in a release channel: C fires once a
// quorum of nodes announced a release since the last reset.
type watch struct {
	n       *notifier
	channel string
	C       chan struct{}
	id      string // the waiter's queue id: releases reserved for others are ignored
	seen    uint64 // nodes that announced a release since reset; under n.mu
	last    string // the announcement that last fired C (announcedSlot); under n.mu
}

// reservePrefix starts a key reserved for a queued waiter (as the scripts
// spell it); tokens (rand.Text, upper case) never start with it.
const reservePrefix = "queued:"

func newNotifier(c *Client) *notifier {
	return &notifier{c: c, subs: make(map[string]*subscription), ps: make([]*redis.PubSub, len(c.nodes))}
}

// watch registers waiter id's interest in channel; its first watcher
// subscribes on every node, waiting at most a node timeout or till ctx ends.
func (n *notifier) watch(ctx context.Context, channel, id string) *watch {
	w := &watch{n: n, channel: channel, C: make(chan struct{}, 1), id: id}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return w // never fires; the caller falls back to retry delays
	}
	s := n.subs[channel]
	if s != nil {
		if s.linger != nil {
			s.linger.Stop()
			s.linger = nil
		}
		s.watches[w] = struct{}{}
		n.mu.Unlock()
		return w
	}
	n.subs[channel] = &subscription{watches: map[*watch]struct{}{w: {}}}
	n.subscribed.Add(1)
	ps := n.conns(true)
	n.mu.Unlock()
	n.each(ctx.Done(), ps, func(ctx context.Context, p *redis.PubSub) error { return p.Subscribe(ctx, channel) })
	return w
}

// watched reports whether a waiter of this client watches channel, or did
// within subscriptionLinger; one atomic load when none does.
func (n *notifier) watched(channel string) bool {
	if n.subscribed.Load() == 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[channel]
	return s != nil && !s.closing
}

// each runs f on every connection at once and waits at most the node timeout
// or till stop: a dial to a stopped node can hold go-redis's PubSub lock for a
// dial timeout, and finishes in the background.
func (n *notifier) each(stop <-chan struct{}, ps []*redis.PubSub, f func(context.Context, *redis.PubSub) error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.c.cfg.nodeTimeout)
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			if err := f(ctx, p); err != nil {
				n.c.cfg.logger.Debug("redlock pub/sub call failed", "err", err)
			}
		})
	}
	go func() { wg.Wait(); cancel() }() // ctx ends when every call has, or at the timeout
	select {
	case <-ctx.Done():
	case <-stop:
	}
}

// dispatch delivers node i's release announcements to the channel's waiters,
// a reservation (queued:<id> or queued:<id>/<slot>) only to its own.
func (n *notifier) dispatch(i int, msgs <-chan *redis.Message) {
	bit := uint64(1) << i
	for m := range msgs {
		id, reserved := strings.CutPrefix(m.Payload, reservePrefix)
		id, _, _ = strings.Cut(id, "/")
		n.mu.Lock()
		if s := n.subs[m.Channel]; s != nil {
			for w := range s.watches {
				if reserved && id != w.id {
					continue
				}
				w.seen |= bit
				if bits.OnesCount64(w.seen) >= n.c.q {
					w.seen = 0
					w.last = m.Payload
					select {
					case w.C <- struct{}{}:
					default:
					}
				}
			}
		}
		n.mu.Unlock()
	}
}

// reset forgets the announcements seen so far (before each attempt).
func (w *watch) reset() {
	w.n.mu.Lock()
	w.seen, w.last = 0, ""
	w.n.mu.Unlock()
	select {
	case <-w.C:
	default:
	}
}

// payload returns the announcement that last fired C since the reset.
func (w *watch) payload() string {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return w.last
}

// close ends the watch; the channel's last one unsubscribes after a linger.
func (w *watch) close() {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[w.channel]
	if s == nil {
		return
	}
	delete(s.watches, w)
	if len(s.watches) > 0 || n.closed {
		return
	}
	s.linger = time.AfterFunc(subscriptionLinger, func() { n.unsubscribe(w.channel, s) })
}

// unsubscribe drops a channel nobody waits for. It stays in subs meanwhile:
// a watcher arriving then joins it and is subscribed again here, in order.
func (n *notifier) unsubscribe(channel string, s *subscription) {
	n.mu.Lock()
	if n.closed || n.subs[channel] != s || len(s.watches) > 0 || s.closing {
		n.mu.Unlock()
		return
	}
	s.closing = true
	ps := n.conns(false)
	n.mu.Unlock()
	n.each(nil, ps, func(ctx context.Context, p *redis.PubSub) error { return p.Unsubscribe(ctx, channel) })

	n.mu.Lock()
	s.closing = false
	if len(s.watches) == 0 || n.closed {
		delete(n.subs, channel)
		n.subscribed.Add(-1)
		n.mu.Unlock()
		return
	}
	ps = n.conns(false)
	n.mu.Unlock()
	n.each(nil, ps, func(ctx context.Context, p *redis.PubSub) error { return p.Subscribe(ctx, channel) })
}

// conns lists the connections created so far (n.mu held); create makes the
// missing ones with their dispatchers (none on an in-memory test node).
func (n *notifier) conns(create bool) []*redis.PubSub {
	ps := make([]*redis.PubSub, 0, len(n.ps))
	for i, p := range n.ps {
		if cl := n.c.nodes[i].Client; p == nil && create && cl != nil {
			p = cl.Subscribe(context.Background())
			n.ps[i] = p
			n.wg.Go(func() { n.dispatch(i, p.Channel()) })
		}
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// close shuts every connection and waits a bounded time for the dispatchers.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for _, s := range n.subs {
		if s.linger != nil {
			s.linger.Stop()
		}
	}
	for _, p := range n.conns(false) {
		n.wg.Go(func() { _ = p.Close() }) // closed: nothing else adds to n.wg
	}
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(max(time.Second, 4*n.c.cfg.nodeTimeout)):
		n.c.cfg.logger.Warn("redlock: pub/sub connections still closing; left to finish in the background")
	}
}
