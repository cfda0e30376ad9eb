// Package drain waits for an asynq queue to be done, for the example
// programs that enqueue a fixed set of tasks and print what happened.
package drain

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// poll is how often the queue is looked at.
const poll = 50 * time.Millisecond

// Queue waits until queue has processed at least n tasks and holds none
// pending, active, scheduled or retrying; it gives up after limit, or when
// ctx ends, with an error saying what was left.
func Queue(ctx context.Context, broker asynq.RedisConnOpt, queue string, n int, limit time.Duration) error {
	insp := asynq.NewInspector(broker)
	defer insp.Close()
	deadline := time.Now().Add(limit)
	for {
		qi, err := insp.GetQueueInfo(queue)
		if err != nil {
			return err
		}
		if qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 && qi.Processed >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tasks not done after %v: %d processed of %d, %d pending, %d active, %d scheduled, %d retrying",
				limit, qi.Processed, n, qi.Pending, qi.Active, qi.Scheduled, qi.Retry)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tasks not done: %w", ctx.Err())
		case <-time.After(poll):
		}
	}
}
