package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultListLimit is the number of resources List returns at most when its
// limit is not positive.
const DefaultListLimit = 1000

// HeldLock is a resource List found with a lock key on some node.
type HeldLock struct {
	Resource string
	Nodes    []NodeState // one per node, as Inspect returns them
}

// Listing is what List found.
type Listing struct {
	Locks []HeldLock // sorted by resource
	// ScanErrs has one entry per node: nil where the node was scanned, its
	// failure otherwise (locks held only there are then missing).
	ScanErrs []error
	// Truncated reports that more resources matched than the limit.
	Truncated bool
}

// List finds the resources locked on any node whose name starts with
// resourcePrefix ("" for all) under the client's key prefix, at most limit of
// them (DefaultListLimit when limit <= 0), and inspects each, waiting at
// least 500ms for each node. It is an operator's tool: it scans every node's
// keyspace (SCAN, never KEYS), so keep it off hot paths. Nodes that fail are
// reported in ScanErrs and in each lock's NodeState (a resource a node
// failed to describe stays listed even if no node that answered holds it);
// the error is reserved for bad input and ctx's end.
func (c *Client) List(ctx context.Context, resourcePrefix string, limit int) (*Listing, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	match := globEscape(c.cfg.prefix) + "{" + globEscape(resourcePrefix) + "*}"
	found := map[string]bool{}
	out := &Listing{ScanErrs: make([]error, len(c.nodes))}
	for i, n := range c.nodes {
		names, err := c.scanNode(ctx, n, match)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			out.ScanErrs[i] = &NodeError{Node: i, Addr: n.addr, Op: "scan", Err: err}
		}
		for _, r := range names {
			found[r] = true
		}
	}
	names := make([]string, 0, len(found))
	for r := range found {
		names = append(names, r)
	}
	slices.Sort(names)
	if len(names) > limit {
		names, out.Truncated = names[:limit], true
	}
	locks, err := c.inspectAll(ctx, names)
	if err != nil {
		return nil, err
	}
	for _, l := range locks {
		// Gone since the scan only if every node answered that it is free.
		if slices.ContainsFunc(l.Nodes, func(s NodeState) bool { return s.Held() || s.Err != nil }) {
			out.Locks = append(out.Locks, l)
		}
	}
	return out, nil
}

// listNodeTimeout is the least time List waits for each node's answer
// about a resource: an operator's read is not latency-bound, and a loaded
// node must not make a held lock look free.
const listNodeTimeout = 500 * time.Millisecond

// inspectAll inspects resources a few at a time: the nodes' workers batch
// the concurrent calls.
func (c *Client) inspectAll(ctx context.Context, names []string) ([]HeldLock, error) {
	locks := make([]HeldLock, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, r := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st, err := c.inspect(ctx, r, max(c.cfg.nodeTimeout, listNodeTimeout))
			locks[i], errs[i] = HeldLock{Resource: r, Nodes: st}, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return locks, nil
}

// scanBatch is the COUNT hint of each SCAN call.
const scanBatch = 1000

// scanNode returns the resources whose lock key (prefix{resource}) on n
// matches the pattern; fencing counters (prefix{resource}:fence) are skipped.
func (c *Client) scanNode(ctx context.Context, n *node, match string) ([]string, error) {
	var names []string
	scan := func(ctx context.Context, cl redis.Cmdable) error {
		var cursor uint64
		for {
			sctx, cancel := context.WithTimeout(ctx, max(10*c.cfg.nodeTimeout, time.Second))
			keys, next, err := cl.Scan(sctx, cursor, match, scanBatch).Result()
			cancel()
			if err != nil {
				return err
			}
			for _, k := range keys {
				if r, ok := c.resourceOf(k); ok {
					names = append(names, r)
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := n.client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		return names, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, m)
		})
	}
	return names, scan(ctx, n.client)
}

// resourceOf returns the resource of a lock key, and false for other keys.
func (c *Client) resourceOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, c.cfg.prefix+"{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	return rest[:len(rest)-1], true
}

// globEscape quotes the characters SCAN's MATCH pattern treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ForceRelease deletes resource's lock key on every node where it still holds
// token (a NodeState.Token seen with Inspect or List) and announces the
// release to waiters; it reports on how many nodes a key was deleted. A key
// that meanwhile changed hands is left alone. It is the operator's
// break-glass: the holder keeps running until its next extension finds the
// lock gone (then its context is cancelled with ErrLockLost), so use it for a
// holder that is stuck or gone, not one that works. A node that fails is in
// the error, matched by errors.As with *NodeError, next to the count of the
// nodes that did delete.
func (c *Client) ForceRelease(ctx context.Context, resource, token string) (int, error) {
	if ctx == nil {
		return 0, invalidf("nil context")
	}
	if c.isClosed() {
		return 0, ErrClosed
	}
	if resource == "" || token == "" {
		return 0, invalidf("ForceRelease needs a resource and a token (got %q, %q)", resource, token)
	}
	k := c.keysFor(resource)
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	args := releaseScript.args(k.lockKeys(), token, k.channel)
	r := c.broadcast("release", resource, c.allNodes(), len(c.nodes), deadline, true, args, releaseScript)
	if err := r.collectAll(ctx, deadline, classifyOne); err != nil {
		return 0, err
	}
	if r.t.failed > 0 {
		return r.t.ok, r.err([]error{ErrQuorum}, "force release not confirmed by every node")
	}
	return r.t.ok, nil
}

// Claim is one token's hold on a resource: the nodes whose lock key carries
// it. A resource normally has one claim; several while contenders split the
// nodes, or when leftovers of an earlier holder remain on a minority.
type Claim struct {
	Token  string
	Holder Holder        // from the token; zero when it carries none
	Nodes  []int         // node indexes, ascending
	TTL    time.Duration // the shortest remaining TTL among those nodes
	Fence  int64         // the highest fencing counter among those nodes
}

// Claims groups a resource's node states (Inspect, List) by token, in node
// order. A claim with at least Client.Quorum() nodes is the lock's holder.
func Claims(states []NodeState) []Claim {
	var out []Claim
	at := map[string]int{}
	for _, s := range states {
		if !s.Held() {
			continue
		}
		i, ok := at[s.Token]
		if !ok {
			h, _ := ParseHolder(s.Token)
			i = len(out)
			at[s.Token] = i
			out = append(out, Claim{Token: s.Token, Holder: h, TTL: s.TTL})
		}
		c := &out[i]
		c.Nodes = append(c.Nodes, s.Node)
		c.TTL = min(c.TTL, s.TTL)
		c.Fence = max(c.Fence, s.Fence)
	}
	return out
}
