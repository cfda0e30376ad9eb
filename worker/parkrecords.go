package worker

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The lock middleware's park records in the broker (docs/guide/HOTKEYS.md,
// "Parking"): a FIFO of "ms|nonce|id" members per queue and resource, and a
// mark per task parked and not started since, both under the queue's hash
// tag. The worker reads them for the /locks page and the parked-tasks
// gauge; the middleware writes them.
func parkQueuePrefix(queue string) string { return "asynq:{" + queue + "}:" }

func parkFIFOPrefix(queue string) string { return parkQueuePrefix(queue) + "asynqlock:park:" }

func parkMarkKey(queue, id string) string { return parkQueuePrefix(queue) + "asynqlock:parked:" + id }

// Bounds of parkedTasks, so that a look at a large backlog stays cheap.
const (
	parkedListResources = 500
	parkedListTasks     = 100
)

// parkedTasks lists the tasks parked in queues, by resource, oldest first: at most 500 resources and the
// first 100 tasks of each. The records are hints (see middleware.WithBroker): a task
// promoted a moment ago may still be listed.
func parkedTasks(ctx context.Context, broker redis.UniversalClient, queues ...string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, q := range queues {
		prefix := parkFIFOPrefix(q)
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

// parkedCount is how many tasks of a queue wait parked in asynq's retry set
// and archive (a task parked on its last retry; parkedInQueue).
type parkedCount struct {
	Retry, Archived int
	// Capped is true when a set held more tasks than the limit looked at:
	// the counts are then lower bounds.
	Capped bool
}

// parkedInQueue counts the tasks of queue that are parked: in asynq's retry set or archive with a
// park mark, i.e. parked and not started since. They are healthy waits for
// a busy resource, counted by asynq among its retry (or archived) tasks; a
// monitor subtracts them to see the retries and archived tasks that are
// failures. It looks at the first limit tasks of the retry set and the
// latest limit of the archive, in two round trips per set.
func parkedInQueue(ctx context.Context, broker redis.UniversalClient, queue string, limit int) (parkedCount, error) {
	var pc parkedCount
	for _, set := range []struct {
		name string
		n    *int
	}{{"retry", &pc.Retry}, {"archived", &pc.Archived}} {
		key := parkQueuePrefix(queue) + set.name
		ids, err := broker.ZRange(ctx, key, 0, int64(limit)).Result()
		if set.name == "archived" {
			ids, err = broker.ZRevRange(ctx, key, 0, int64(limit)).Result()
		}
		if err != nil {
			return pc, err
		}
		if len(ids) > limit {
			ids, pc.Capped = ids[:limit], true
		}
		n, err := countMarked(ctx, broker, queue, ids)
		if err != nil {
			return pc, err
		}
		*set.n = n
	}
	return pc, nil
}

// countMarked counts the ids that have a park mark, in one pipeline (the
// marks share the queue's hash tag: one shard on a Redis Cluster).
func countMarked(ctx context.Context, broker redis.UniversalClient, queue string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	pipe := broker.Pipeline()
	cmds := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Exists(ctx, parkMarkKey(queue, id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}
