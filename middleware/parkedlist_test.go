package middleware

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// parkedTasks lists the tasks parked in queues by resource, oldest first,
// from the FIFO records (what the worker's /locks page shows).
func parkedTasks(ctx context.Context, broker redis.UniversalClient, queues ...string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, q := range queues {
		prefix := fifoKey(q, "")
		keys, err := broker.Keys(ctx, prefix+"*").Result()
		if err != nil {
			return out, err
		}
		for _, k := range keys {
			members, err := broker.LRange(ctx, k, 0, -1).Result()
			if err != nil {
				return out, err
			}
			for _, m := range members {
				if parts := strings.SplitN(m, "|", 3); len(parts) == 3 {
					out[strings.TrimPrefix(k, prefix)] = append(out[strings.TrimPrefix(k, prefix)], parts[2])
				}
			}
		}
	}
	return out, nil
}
