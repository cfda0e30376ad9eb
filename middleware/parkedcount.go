package middleware

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ParkedCount is how many tasks of a queue wait parked in asynq's retry and
// scheduled sets (ParkedInQueue).
type ParkedCount struct {
	Retry, Scheduled int
	// Capped is true when a set held more tasks than the limit looked at:
	// the counts are then lower bounds.
	Capped bool
}

// ParkedInQueue counts the tasks of queue (in the broker given to
// WithBroker) that are parked: in asynq's retry or scheduled set with a
// park mark, i.e. parked and not started since. They are healthy waits for
// a busy resource, counted by asynq among its retry (or scheduled) tasks; a
// monitor subtracts them to see the retries that are failures. It looks at
// the first limit tasks of each set, in two round trips per set.
func ParkedInQueue(ctx context.Context, broker redis.UniversalClient, queue string, limit int) (ParkedCount, error) {
	var pc ParkedCount
	for _, set := range []struct {
		name string
		n    *int
	}{{"retry", &pc.Retry}, {"scheduled", &pc.Scheduled}} {
		ids, err := broker.ZRange(ctx, queuePrefix(queue)+set.name, 0, int64(limit)).Result()
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
		cmds[i] = pipe.Exists(ctx, markKey(queue, id))
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
