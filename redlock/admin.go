package redlock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// scan returns the resources whose lock key, on any node, starts with
// resourcePrefix under the client's key prefix, and each node's scan failure
// (nil where it was scanned). It is the operator's listing (see
// worker/internal/lockadmin): it scans every node's keyspace (SCAN, never KEYS).
func (c *Client) scan(ctx context.Context, resourcePrefix string) ([]string, []error, error) {
	if ctx == nil {
		return nil, nil, invalidf("nil context")
	}
	if c.isClosed() {
		return nil, nil, ErrClosed
	}
	var found []string
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		for _, match := range c.scanPatterns(resourcePrefix) {
			names, err := c.scanNode(ctx, n, match)
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			if err != nil && errs[i] == nil {
				errs[i] = &NodeError{Node: i, Addr: n.addr, Op: "scan", Err: err}
			}
			for _, name := range names {
				if strings.HasPrefix(name, resourcePrefix) {
					found = append(found, name)
				}
			}
		}
	}
	return found, errs, nil
}

// scanBatch is the COUNT hint of each SCAN call.
const scanBatch = 1000

// scanNode returns the resources whose lock key (see keyOf) on n matches the
// pattern; fencing counters and queues are skipped.
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

// slotOf returns the slot that token holds on some node, and the limit,
// when resource is used with one (limit 0 otherwise).
func (c *Client) slotOf(ctx context.Context, resource, token string) (slot, limit int) {
	states, err := c.inspect(ctx, resource, c.cfg.nodeTimeout)
	if err != nil {
		return 0, 0
	}
	for _, st := range states {
		if st.Limit > 1 && st.Token == token {
			return st.Slot, st.Limit
		}
	}
	return 0, 0
}

// forceRelease deletes resource's lock key (or its slot's key) on every node where it still
// holds token and announces the release to waiters; it reports on how many
// nodes a key was deleted. A key that meanwhile changed hands is left alone.
// It is the operator's break-glass (see worker/internal/lockadmin).
func (c *Client) forceRelease(ctx context.Context, resource, token string) (int, error) {
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
	s, args := releaseScript, releaseScript.args(k.lockKeys(), token, k.channel)
	if slot, limit := c.slotOf(ctx, resource, token); limit > 1 {
		k = c.slotKeys(resource, slot)
		s, args = c.slotRelease(k, token, k.channel, slot, limit, nil)
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
