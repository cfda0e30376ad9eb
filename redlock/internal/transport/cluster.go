package transport

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// loadEveryMaster loads the scripts on every master of a cluster node (a
// SCRIPT LOAD in the pipeline reaches one shard) and reports true; false,
// doing nothing, for a single server. A master that appears later answers
// NOSCRIPT once, which clears loaded.
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
