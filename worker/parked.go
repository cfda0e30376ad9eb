package worker

import (
	"context"
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"
)

// brokerParked reads the tasks the worker's middleware parked in the broker,
// for the /locks page (the default ParkedReader).
type brokerParked struct {
	broker redis.UniversalClient
	queues []string
}

func newBrokerParked(broker redis.UniversalClient, queues map[string]int) brokerParked {
	return brokerParked{broker: broker, queues: slices.Sorted(maps.Keys(queues))}
}

// ParkedTasks implements ParkedReader.
func (p brokerParked) ParkedTasks(ctx context.Context) (map[string][]string, error) {
	return parkedTasks(ctx, p.broker, p.queues...)
}
