package worker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// queueParkedLimit bounds the tasks of each set one scrape looks at.
const queueParkedLimit = 10000

var queueParkedDesc = prometheus.NewDesc("asynqlock_queue_parked_tasks",
	"Tasks parked in the broker by the lock middleware (waiting for a busy resource, not failed), by queue and "+
		"asynq state (retry, or archived for a task parked on its last retry), read at scrape time: subtract them from "+
		"asynq_tasks_enqueued_total{state=\"retry\"} (and \"archived\") for the tasks that failed. "+
		"The same value on every worker of a broker.",
	[]string{"queue", "state"}, nil)

// queueParked reports asynqlock_queue_parked_tasks, counted in the broker
// at each scrape (parked tasks are the broker's state, not a process's).
// While the broker does not answer it reports nothing:
// asynqlock_broker_up says so.
type queueParked struct {
	broker  redis.UniversalClient
	queues  []string
	timeout time.Duration
}

func newQueueParked(broker redis.UniversalClient, queues map[string]int) *queueParked {
	return &queueParked{broker: broker, queues: slices.Sorted(maps.Keys(queues)), timeout: 2 * time.Second}
}

// Describe implements prometheus.Collector.
func (q *queueParked) Describe(ch chan<- *prometheus.Desc) { ch <- queueParkedDesc }

// Collect implements prometheus.Collector.
func (q *queueParked) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	defer cancel()
	for _, queue := range q.queues {
		pc, err := parkedInQueue(ctx, q.broker, queue, queueParkedLimit)
		if err != nil {
			return
		}
		ch <- prometheus.MustNewConstMetric(queueParkedDesc, prometheus.GaugeValue, float64(pc.Retry), queue, "retry")
		ch <- prometheus.MustNewConstMetric(queueParkedDesc, prometheus.GaugeValue, float64(pc.Archived), queue, "archived")
	}
}
