package worker

import (
	"fmt"

	"github.com/asynqlock/asynqlock/middleware"
)

// policy turns WORKER_CONFLICT_POLICY into the middleware's conflict
// policy.
func (c *Config) policy() (middleware.Option, error) {
	switch c.ConflictPolicy {
	case "wait":
		return middleware.Wait(c.ConflictWait), nil
	case "requeue":
		return middleware.Requeue(), nil
	case "skip":
		return middleware.Skip(), nil
	case "fail":
		return middleware.Fail(), nil
	}
	return nil, fmt.Errorf("must be wait, requeue, skip or fail, got %q", c.ConflictPolicy)
}

// limitOf is WORKER_LIMITS's option for taskType's handlers, if any.
func (c *Config) limitOf(taskType string) []middleware.Option {
	if n, ok := c.Limits[taskType]; ok {
		return []middleware.Option{middleware.WithLimit(n)}
	}
	return nil
}
