package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/asynqlock/asynqlock/internal/redisurl"
)

// dialNode makes the client of one node URL: a *redis.Client for a single
// server, a *redis.ClusterClient for a redis-cluster:// URL (one lock node
// whose shards split the keys), both tuned for locking.
func dialNode(raw string, nodeTimeout time.Duration) (redis.UniversalClient, error) {
	single, cluster, err := redisurl.ParseLockNode(raw)
	if err != nil {
		return nil, err
	}
	if cluster != nil {
		tuneClusterForLocking(cluster, nodeTimeout)
		return redis.NewClusterClient(cluster), nil
	}
	tuneForLocking(single, nodeTimeout)
	return redis.NewClient(single), nil
}

// tuneClusterForLocking applies tuneForLocking's settings to every shard's
// client. Redirections (MOVED, ASK) stay allowed: they are how the client
// follows a slot to its new master after a failover.
func tuneClusterForLocking(o *redis.ClusterOptions, nodeTimeout time.Duration) {
	s := &redis.Options{
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		PoolTimeout: o.PoolTimeout, DialerRetries: o.DialerRetries, Protocol: o.Protocol,
		MaintNotificationsConfig: o.MaintNotificationsConfig,
	}
	tuneForLocking(s, nodeTimeout)
	o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries = s.ContextTimeoutEnabled, s.MaxRetries, s.DialerRetries
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = s.DialTimeout, s.ReadTimeout, s.WriteTimeout, s.PoolTimeout
	o.Protocol = s.Protocol
	if o.MaintNotificationsConfig == nil {
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
}

// loadEveryMaster loads the scripts on every master of a cluster node, since
// a keyless SCRIPT LOAD in the pipeline reaches only one shard and the others
// would answer NOSCRIPT on first use. It reports false, doing nothing, for a
// single server, whose pipeline loads them. A master that appears later (a
// failover) answers NOSCRIPT once, which clears loaded and loads again.
func (n *node) loadEveryMaster(ctx context.Context) bool {
	cc, ok := n.client.(*redis.ClusterClient)
	if !ok {
		return false
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		p := m.Pipeline()
		for _, s := range allScripts {
			p.ScriptLoad(ctx, s.src)
		}
		_, err := p.Exec(ctx)
		return err
	})
	n.loaded = err == nil
	return true
}
