package middleware

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Bounds of ParkedTasks, so that a look at a large backlog stays cheap.
const (
	parkedListResources = 500
	parkedListTasks     = 100
)

// ParkedTasks lists the tasks parked in queues (the broker given to
// WithBroker), by resource, oldest first: at most 500 resources and the
// first 100 tasks of each. The records are hints (see WithBroker): a task
// promoted a moment ago may still be listed.
func ParkedTasks(ctx context.Context, broker redis.UniversalClient, queues ...string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, q := range queues {
		prefix := fifoKey(q, "")
		keys, err := scanKeys(ctx, broker, prefix+"*", parkedListResources-len(out))
		if err != nil {
			return out, err
		}
		for _, k := range keys {
			members, err := broker.LRange(ctx, k, 0, parkedListTasks-1).Result()
			if err != nil {
				return out, err
			}
			res := strings.TrimPrefix(k, prefix)
			for _, m := range members {
				if id := parkedID(m); id != "" {
					out[res] = append(out[res], id)
				}
			}
		}
	}
	return out, nil
}

// parkedID is the task ID of a FIFO member "ms|nonce|id".
func parkedID(member string) string {
	parts := strings.SplitN(member, "|", 3)
	if len(parts) != 3 {
		return ""
	}
	return parts[2]
}

// scanKeys returns up to limit keys matching pattern; on a Redis Cluster it
// scans every master (the queue's hash tag puts them on one, but which one
// is the cluster's business).
func scanKeys(ctx context.Context, broker redis.UniversalClient, pattern string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	if cc, ok := broker.(*redis.ClusterClient); ok {
		var (
			mu  sync.Mutex
			all []string
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			keys, err := scanOne(ctx, n, pattern, limit)
			mu.Lock()
			all = append(all, keys...)
			mu.Unlock()
			return err
		})
		return all[:min(len(all), limit)], err
	}
	return scanOne(ctx, broker, pattern, limit)
}

func scanOne(ctx context.Context, c redis.Cmdable, pattern string, limit int) ([]string, error) {
	var keys []string
	it := c.Scan(ctx, 0, pattern, 100).Iterator()
	for it.Next(ctx) && len(keys) < limit {
		keys = append(keys, it.Val())
	}
	return keys, it.Err()
}
