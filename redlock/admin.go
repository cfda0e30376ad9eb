package redlock

import (
	"cmp"
	"context"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Admin holds the calls of an operator's tools: the nodes' reachability
// (Ping) and settings (Check), the locks they hold (Scan), and a forced
// release (Redisson's forceUnlock). Client.Inspect shows one resource.
type Admin struct{ c *Client }

// Admin returns the operator calls on c's nodes.
func (c *Client) Admin() Admin { return Admin{c: c} }

// Ping pings every node at once and reports each one's answer in a
// NodeReport of Node, Addr and Err (a *NodeError; nil when it answered). It
// waits for every node, at most the node timeout, so that a probe can count
// the nodes that are up, not just learn the first decided outcome.
func (a Admin) Ping(ctx context.Context) ([]NodeReport, error) {
	c := a.c
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	r := c.broadcast("ping", "", c.allNodes(), c.q, deadline, false, []any{"ping"}, nil)
	if err := r.collectAll(ctx, deadline, classifyAnswered); err != nil {
		return nil, err
	}
	out := make([]NodeReport, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = NodeReport{Node: i, Addr: n.Addr}
		if sl := r.slots[i]; sl.out != outOK {
			out[i].Err = &NodeError{Node: i, Addr: n.Addr, Op: "ping", Err: cmp.Or(sl.err, transport.ErrNodeTimeout)}
		}
	}
	return out, nil
}

// Scan returns the resources, unsorted and possibly repeated, whose name
// starts with resourcePrefix and whose lock key is on any node, and each
// node's scan failure (nil where it was scanned). It uses SCAN, never KEYS.
func (a Admin) Scan(ctx context.Context, resourcePrefix string) ([]string, []error, error) {
	c := a.c
	if err := c.usable(ctx); err != nil {
		return nil, nil, err
	}
	var found []string
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		for _, match := range c.scanPatterns(resourcePrefix) {
			names, err := c.scanNode(ctx, n, match, resourcePrefix)
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			if err != nil && errs[i] == nil {
				errs[i] = &NodeError{Node: i, Addr: n.Addr, Op: "scan", Err: err}
			}
			found = append(found, names...)
		}
	}
	return found, errs, nil
}

// scanNode returns the resources under prefix whose lock key on n matches
// the pattern.
func (c *Client) scanNode(ctx context.Context, n *transport.Node, match, prefix string) ([]string, error) {
	var names []string
	scan := func(ctx context.Context, cl redis.Cmdable) error {
		var cursor uint64
		for {
			sctx, cancel := context.WithTimeout(ctx, max(10*c.cfg.nodeTimeout, time.Second))
			keys, next, err := cl.Scan(sctx, cursor, match, 1000).Result() // COUNT hint
			cancel()
			if err != nil {
				return err
			}
			for _, k := range keys {
				if r, ok := c.resourceOfSlot(k); ok && strings.HasPrefix(r, prefix) {
					names = append(names, r)
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := n.Client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, m)
		})
		return names, err
	}
	err := scan(ctx, n.Client) // before names is read: scan appends to it
	return names, err
}

// globEscape quotes the characters SCAN's MATCH pattern treats specially.
var globEscape = strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`, `\`, `\\`).Replace

// ForceRelease deletes resource's lock key (or slot) on every node where it
// still holds token, announces the release to waiters, and reports on how
// many nodes it did; a key that changed hands is left alone. The holder
// runs on until its next extension fails.
func (a Admin) ForceRelease(ctx context.Context, resource, token string) (int, error) {
	c := a.c
	if err := c.usable(ctx); err != nil {
		return 0, err
	}
	if resource == "" || token == "" {
		return 0, invalidf("ForceRelease needs a resource and a token (got %q, %q)", resource, token)
	}
	k := c.keysFor(resource)
	s, args := releaseScript, scriptArgs(releaseScript, k.lockKeys(), token, k.channel)
	states, _ := c.inspect(ctx, resource, c.cfg.nodeTimeout) // nil on failure
	for _, st := range states {
		if st.Limit > 1 && st.Token == token { // a slot of a limited resource
			k = c.slotKeys(resource, st.Slot)
			s, args = c.slotRelease(k, token, k.channel, st.Slot, st.Limit, nil)
			break
		}
	}
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	r := c.broadcast("release", resource, c.allNodes(), len(c.nodes), deadline, true, args, s)
	if err := r.collectAll(ctx, deadline, classifyOne); err != nil {
		return 0, err
	}
	if r.t.failed > 0 {
		return r.t.ok, r.err([]error{ErrQuorum}, "force release not confirmed by every node")
	}
	return r.t.ok, nil
}
