package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/redisurl"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Client acquires Redlock locks over a fixed set of independent Redis masters.
// It is safe for concurrent use; create one per process and share it.
type Client struct {
	cfg    config
	nodes  []*transport.Node
	q      int
	owned  []redis.UniversalClient // clients created by NewFromURLs, closed by Close
	closed chan struct{}
	once   sync.Once
	bgMu   sync.Mutex     // orders spawn and ReleaseAsync against Close
	bg     sync.WaitGroup // stragglers, keep-alives and other background work
	// releasing counts the ReleaseAsync calls under way; closing, set by
	// Close before it waits for them, stops new ones from being counted.
	releasing sync.WaitGroup
	closing   bool
	work      sync.WaitGroup // batching workers
	gates     gates
	notify    *notifier
	// busy counts the locks held and the callers waiting on a round, whose
	// calls a node's worker may wait for (transport's gather).
	busy       atomic.Int64
	rounds     sync.Pool // finished rounds (broadcastLook, round.free)
	procHolder string    // names this process in every token (holder.go)
	tracer     tracers
	// warmed is closed once every node's worker has dialed it and loaded
	// the scripts, or failed to; cold counts those still at it.
	warmed chan struct{}
	cold   atomic.Int32
}

// New returns a Client over the given nodes: independent Redis masters (not
// replicas of each other), usually 3 or 5, as go-redis clients the caller
// keeps owning (Close does not close them). A *redis.Client whose settings
// would let a dead node stall the calls queued behind it (command retries,
// several dial attempts, no read or write timeout) is replaced by one made
// from its options for locking, which Close closes; hooks added to it before
// New see its commands (docs/guide/OPERATIONS.md, "Clients you build
// yourself"). Clients of other kinds are used as given.
func New(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	return newClient(nodes, nil, cfg)
}

func newClient(nodes []redis.UniversalClient, owned []redis.UniversalClient, cfg config) (*Client, error) {
	if len(nodes) == 0 {
		return nil, invalidf("no nodes given")
	}
	if len(nodes) > maxNodes {
		return nil, invalidf("%d nodes given, at most %d supported", len(nodes), maxNodes)
	}
	seen := make(map[string]int, len(nodes))
	list := make([]*transport.Node, 0, len(nodes))
	for i, cl := range nodes {
		if cl == nil {
			return nil, invalidf("node %d is a nil client", i)
		}
		id := nodeIdentity(cl)
		if j, dup := seen[id]; dup {
			return nil, invalidf("node %d (%s) is the same node as node %d: Redlock needs independent nodes", i, transport.NodeAddr(i, cl), j)
		}
		seen[id] = i
	}
	for i, cl := range nodes {
		if own := fitForLocking(cl, cfg.nodeTimeout); own != nil {
			owned = append(owned, own)
			cl = own
		}
		list = append(list, transport.NewNode(i, transport.NodeAddr(i, cl), cl, transportEnv))
	}
	return start(cfg, list, owned), nil
}

// start builds a Client over ready nodes and starts their workers.
func start(cfg config, nodes []*transport.Node, owned []redis.UniversalClient) *Client {
	c := &Client{cfg: cfg, nodes: nodes, q: quorum(len(nodes)), owned: owned, closed: make(chan struct{}),
		procHolder: processHolder(), warmed: make(chan struct{})}
	if tp := cfg.tracerProvider; tp != nil {
		c.tracer.fixed = tp.Tracer(tracerName)
	}
	c.cold.Store(int32(len(nodes)))
	warmed := func() {
		if c.cold.Add(-1) == 0 {
			close(c.warmed)
		}
	}
	for _, n := range c.nodes {
		n.Failed, n.Debug = c.nodeFailed, cfg.logger.Debug
		n.Window, n.Busy = cfg.batchWindow, &c.busy
		c.work.Add(1)
		go n.Serve(c.closed, &c.work, warmed)
	}
	c.notify = newNotifier(c)
	return c
}

// nodeIdentity tells two nodes apart: the same client value twice, or two
// clients for the same address and database, are the same node.
func nodeIdentity(cl redis.UniversalClient) string {
	if rc, ok := cl.(*redis.Client); ok {
		o := rc.Options()
		return fmt.Sprintf("%s/%d", strings.ToLower(o.Addr), o.DB)
	}
	if cc, ok := cl.(*redis.ClusterClient); ok {
		return "cluster:" + strings.Join(cc.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T:%p", cl, cl)
}

// NewFromURLs dials one node per URL: redis://[user:password@]host:port[/db]
// or rediss:// for TLS, or a whole Redis Cluster as one node with
// redis-cluster://[user:password@]host:port[?addr=host2:port2&addr=...] or
// rediss-cluster://, with go-redis URL parameters allowed and, for rediss://,
// tls_ca_file (a private CA), tls_cert_file and tls_key_file (a client
// certificate). The clients it creates are tuned for locking and closed by
// Close. Errors name the URL by its position and redacted form, never with
// its password. One server reached by two URLs, and a node no retry would
// make usable (a wrong password, an ACL denial, a Redis Cluster member), are
// refused (ErrInvalid) once they answer a first probe; a node that does not
// answer yet is not (docs/guide/OPERATIONS.md).
func NewFromURLs(urls []string, opts ...Option) (*Client, error) {
	if len(urls) == 0 {
		return nil, invalidf("no node URLs given")
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	clients := make([]redis.UniversalClient, 0, len(urls))
	closeAll := func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}
	for i, raw := range urls {
		cl, err := dialNode(raw, cfg.nodeTimeout)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("node %d: %w", i, invalidf("%v", err))
		}
		clients = append(clients, cl)
	}
	c, err := newClient(clients, clients, cfg)
	if err != nil {
		closeAll()
		return nil, err
	}
	if !cfg.inspectOnly {
		if err := c.firstContact(redactedURLs(urls)); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	return c, nil
}

// redactedURLs are the URLs as errors show them.
func redactedURLs(urls []string) []string {
	out := make([]string, len(urls))
	for i, raw := range urls {
		if u, err := redisurl.Parse(raw); err == nil {
			out[i] = redisurl.Redact(u)
		}
	}
	return out
}

// tuneForLocking sets client options so that a dead or paused node costs a
// caller at most about the node timeout.
func tuneForLocking(o *redis.Options, nodeTimeout time.Duration) {
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	if o.DialerRetries == 0 {
		o.DialerRetries = 1 // go-redis would otherwise dial a dead node 5 times
	}
	if o.MaintNotificationsConfig == nil { // standalone masters: skip the handshake round trip
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	io := ioTimeout(nodeTimeout)
	if o.DialTimeout > io {
		o.DialTimeout = io
	}
	for _, d := range []*time.Duration{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout} {
		if *d == 0 {
			*d = io
		}
	}
	if o.Protocol == 0 {
		// RESP2 unless the URL asks otherwise: on RESP3 go-redis peeks at
		// the socket for push notifications around every command.
		o.Protocol = 2
	}
}

// ioTimeout is a lock node's dial, read and write timeout: a few node
// timeouts, so that a slow answer still arrives.
func ioTimeout(nodeTimeout time.Duration) time.Duration {
	return max(4*nodeTimeout, 200*time.Millisecond)
}

// Close stops the client: releases under way finish first, pending waits
// end with errClosed, background work finishes, and clients created by
// NewFromURLs are closed. Locks still held expire at their TTL; release
// them first to hand them over at once.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		c.bgMu.Lock()
		c.closing = true
		c.bgMu.Unlock()
		c.releasing.Wait() // each is bounded by its node timeout
		c.bgMu.Lock()
		close(c.closed)
		c.bgMu.Unlock()
		c.notify.close()
		c.work.Wait()
		c.bg.Wait()
		for _, cl := range c.owned {
			err = errors.Join(err, cl.Close())
		}
	})
	return err
}

// awaitWarm holds a call made while the nodes are still being dialed until
// they are ready, at most the I/O timeout, so that its node timeout does
// not pay for the dial (docs/design/REDLOCK.md).
func (c *Client) awaitWarm(ctx context.Context) {
	select {
	case <-c.warmed:
		return
	default:
	}
	select {
	case <-c.warmed:
	case <-time.After(ioTimeout(c.cfg.nodeTimeout)):
	case <-ctx.Done():
	case <-c.closed:
	}
}

// usable refuses a call with a nil context or on a closed client.
func (c *Client) usable(ctx context.Context) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if c.isClosed() {
		return errClosed
	}
	return nil
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// spawn runs f in the background unless the client is closed; Close waits
// for it.
func (c *Client) spawn(f func()) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.isClosed() {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		f()
	}()
	return true
}
