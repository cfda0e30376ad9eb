package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redisurl"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// dialNode makes the client of one node URL, tuned for locking: a
// *redis.ClusterClient for a redis-cluster:// URL, else a *redis.Client.
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
// client, and follows a MOVED or an ASK but retries a dead shard master
// once, not thrice (docs/guide/OPERATIONS.md, Scaling out).
func tuneClusterForLocking(o *redis.ClusterOptions, nodeTimeout time.Duration) {
	if o.MaxRedirects == 0 {
		o.MaxRedirects = 1
	}
	s := &redis.Options{
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		PoolTimeout: o.PoolTimeout, DialerRetries: o.DialerRetries, Protocol: o.Protocol,
		MaintNotificationsConfig: o.MaintNotificationsConfig,
	}
	tuneForLocking(s, nodeTimeout)
	o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries = s.ContextTimeoutEnabled, s.MaxRetries, s.DialerRetries
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = s.DialTimeout, s.ReadTimeout, s.WriteTimeout, s.PoolTimeout
	o.Protocol, o.MaintNotificationsConfig = s.Protocol, s.MaintNotificationsConfig
}

// checkCluster runs Check's calls on every master of a cluster node (a
// keyless command reaches one arbitrary shard) and sums the shards up.
func checkCluster(ctx context.Context, n *transport.Node, cc *redis.ClusterClient) NodeReport {
	var mu sync.Mutex
	var shards []NodeReport
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		s := checkServer(ctx, n.Idx, m.Options().Addr, m)
		mu.Lock()
		defer mu.Unlock()
		shards = append(shards, s)
		return nil
	})
	r := NodeReport{Node: n.Idx, Addr: n.Addr}
	if err != nil && len(shards) == 0 {
		r.Err = err // not even the cluster's layout is known
		return r
	}
	slices.SortFunc(shards, func(a, b NodeReport) int { return strings.Compare(a.Addr, b.Addr) })
	summarize(&r, shards)
	return r
}

// summarize fills a cluster node's report from its shards' (NodeReport.Shards).
func summarize(r *NodeReport, shards []NodeReport) {
	r.Shards = shards
	var ids, versions []string
	worst, settled := time.Duration(-1), false
	for _, s := range shards {
		if s.Misconfigured != nil && r.Misconfigured == nil {
			r.Misconfigured = fmt.Errorf("shard %s: %w", s.Addr, s.Misconfigured)
		}
		switch {
		case s.Err != nil && r.Err == nil:
			r.Err = fmt.Errorf("shard %s: %w", s.Addr, s.Err)
		case s.ConfigErr != nil && r.ConfigErr == nil:
			r.ConfigErr = fmt.Errorf("shard %s: %w", s.Addr, s.ConfigErr)
		}
		if s.Err != nil {
			continue
		}
		ids = append(ids, s.RunID)
		if !slices.Contains(versions, s.Version) {
			versions = append(versions, s.Version)
		}
		if off := s.ClockOffset.Abs(); off > worst {
			worst, r.ClockOffset, r.RTT = off, s.ClockOffset, s.RTT
		}
		if s.ConfigErr != nil {
			continue
		}
		// The settings of a shard that breaks an assumption, else the first's.
		if !settled || s.evicts() {
			r.MaxmemoryPolicy, r.Maxmemory = s.MaxmemoryPolicy, s.Maxmemory
		}
		if !settled || !s.survivesRestart() {
			r.AppendOnly, r.AppendFsync = s.AppendOnly, s.AppendFsync
		}
		settled = true
	}
	r.RunID, r.Version = strings.Join(ids, ","), strings.Join(versions, ",")
	r.ClusterEnabled = true
}
