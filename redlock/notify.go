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
// last waiter left, so that a hot resource is not subscribed and unsubscribed
// at every hand-off.
const subscriptionLinger = 2 * time.Second

// notifier wakes Acquire waiters when a holder releases. Each node has one
// pub/sub connection shared by all waiters of the client; a resource's
// release channel is subscribed while someone waits for it.
type notifier struct {
	c      *Client
	mu     sync.Mutex
	subs   map[string]*subscription
	ps     []*redis.PubSub // per node, created on first use
	wg     sync.WaitGroup
	closed bool
	// subscribed mirrors len(subs), for watched's fast path.
	subscribed atomic.Int32
}

type subscription struct {
	watches map[*watch]struct{}
	linger  *time.Timer
	closing bool // an unsubscription is being sent
}

// watch is one waiter's interest in a release channel. C receives a value
// once a quorum of nodes has announced a release since the last reset.
type watch struct {
	n       *notifier
	channel string
	C       chan struct{}
	seen    uint64 // nodes that announced a release since reset; under n.mu
	id      string // the waiter's queue id: ignore releases reserved for others
	last    string // the announcement that last fired C (a slot's number, see announcedSlot); under n.mu
}

// reservePrefix starts a lock key's value while it is reserved for a queued
// waiter. Tokens (rand.Text) are upper case: they never start with it. The
// scripts (lua/turn.lua, queue_release.lua, ...) spell it out.
const reservePrefix = "queued:"

// wants reports whether a release announcement concerns the watch's waiter.
// Called with n.mu held.
func (w *watch) wants(payload string) bool {
	id, reserved := strings.CutPrefix(payload, reservePrefix)
	id, _, _ = strings.Cut(id, "/") // a slot's: queued:<id>/<slot>
	return !reserved || id == w.id
}

func newNotifier(c *Client) *notifier {
	return &notifier{c: c, subs: make(map[string]*subscription), ps: make([]*redis.PubSub, len(c.nodes))}
}

// watch registers the interest of waiter id in channel, subscribing on every
// node if this is the channel's first watcher. It ignores releases that
// reserve the key for another waiter: only that waiter can take it. It waits for the subscriptions to be sent, at
// most one node timeout and never past the end of ctx (they go on in the
// background).
func (n *notifier) watch(ctx context.Context, channel, id string) *watch {
	w := &watch{n: n, channel: channel, C: make(chan struct{}, 1), id: id}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return w // never fires; the caller falls back to retry delays
	}
	s := n.subs[channel]
	fresh := s == nil
	if fresh {
		s = &subscription{watches: make(map[*watch]struct{})}
		n.subs[channel] = s
		n.subscribed.Add(1)
	} else if s.linger != nil {
		s.linger.Stop()
		s.linger = nil
	}
	s.watches[w] = struct{}{}
	var ps []*redis.PubSub
	if fresh {
		ps = n.conns(true)
	}
	n.mu.Unlock()
	if fresh {
		n.each(ctx.Done(), ps, func(ctx context.Context, p *redis.PubSub) error { return p.Subscribe(ctx, channel) })
	}
	return w
}

// watched reports whether this client watches channel's releases: a waiter
// of the resource watches it now, or did within subscriptionLinger. The
// common case, a client that watches nothing, costs one atomic load.
func (n *notifier) watched(channel string) bool {
	if n.subscribed.Load() == 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[channel]
	return s != nil && !s.closing
}

// each runs f on every node's connection at once and waits at most the node
// timeout, or until stop is closed: go-redis's PubSub takes a lock that a
// dial to a stopped node can hold for the client's whole dial timeout, so a
// straggler finishes in the background instead of delaying the waiter.
func (n *notifier) each(stop <-chan struct{}, ps []*redis.PubSub, f func(context.Context, *redis.PubSub) error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.c.cfg.nodeTimeout)
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx, p); err != nil {
				n.c.cfg.logger.Debug("redlock pub/sub call failed", "err", err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); cancel(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-stop:
	}
}

// dispatch delivers node i's release announcements to the channel's waiters.
func (n *notifier) dispatch(i int, msgs <-chan *redis.Message) {
	defer n.wg.Done()
	bit := uint64(1) << i
	for m := range msgs {
		n.mu.Lock()
		if s := n.subs[m.Channel]; s != nil {
			for w := range s.watches {
				if !w.wants(m.Payload) {
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

// reset forgets announcements seen so far; call it before each attempt so
// that only releases after the attempt wake the waiter.
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

// close ends the watch; the last watcher of a channel schedules its
// unsubscription after a linger period.
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

// unsubscribe drops a channel nobody waits for. The subscription stays in
// the map while UNSUBSCRIBE is sent, so that a watcher arriving meanwhile
// joins it, and is then subscribed again here, in order: a SUBSCRIBE can
// never be overtaken by an older UNSUBSCRIBE.
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

// conns lists the nodes' pub/sub connections: those created so far, or
// with create all of them, each with its dispatcher (an in-memory test node
// has none). Called with n.mu held.
func (n *notifier) conns(create bool) []*redis.PubSub {
	ps := make([]*redis.PubSub, 0, len(n.ps))
	for i, p := range n.ps {
		if cl := n.c.nodes[i].Client; p == nil && create && cl != nil {
			p = cl.Subscribe(context.Background())
			n.ps[i] = p
			n.wg.Add(1)
			go n.dispatch(i, p.Channel())
		}
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// close shuts every pub/sub connection and waits for the dispatchers, at
// most a bounded time (a connection stuck dialing a stopped node is left to
// finish on its own).
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for _, s := range n.subs {
		if s.linger != nil {
			s.linger.Stop()
		}
	}
	ps := n.conns(false)
	n.mu.Unlock()
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Add(1)
			go func() { defer wg.Done(); _ = p.Close() }()
		}
		wg.Wait()
		n.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(max(time.Second, 4*n.c.cfg.nodeTimeout)):
		n.c.cfg.logger.Warn("redlock: pub/sub connections still closing; left to finish in the background")
	}
}
