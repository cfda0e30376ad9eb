package transport

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// loadEveryMaster loads the scripts on every master of a cluster node, since
// a keyless SCRIPT LOAD in the pipeline reaches only one shard and the others
// would answer NOSCRIPT on first use. It reports false, doing nothing, for a
// single server, whose pipeline loads them. A master that appears later (a
// failover) answers NOSCRIPT once, which clears loaded and loads again.
func (n *Node) loadEveryMaster(ctx context.Context) bool {
	cc, ok := n.Client.(*redis.ClusterClient)
	if !ok {
		return false
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		p := m.Pipeline()
		for _, s := range n.env.Scripts {
			p.ScriptLoad(ctx, s.Src)
		}
		_, err := p.Exec(ctx)
		return err
	})
	n.loaded = err == nil
	return true
}

// movedHint names the fix on a MOVED answer from a node given as a single
// server: it is a Redis Cluster member, and keys of other shards' slots can
// never be set there. Other errors are returned as they are.
func (n *Node) movedHint(err error) error {
	if err == nil || !n.single || !redis.HasErrorPrefix(err, "MOVED") {
		return err
	}
	return fmt.Errorf("%w (a Redis Cluster member given as a single server: write the node as redis-cluster://%s)", err, n.Addr)
}
